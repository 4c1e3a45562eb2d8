"""Durable runs on the command line (README, "Durable runs: store, resume, traces,
approval"): ``exec`` through the run store and the
approval gate, and ``plandag runs``, ``resume``, ``approve``, ``reject``.

* ``exec`` records every run in the store (``--store PATH`` or ``PLANDAG_STORE``; default in
  the user's data folder) and writes its trace (``traces/RUN_ID.jsonl`` beside the
  database; ``--redact`` masks personal data in it). With effects, ``--approve ask`` (the
  default) shows the whole plan and asks on the terminal (no terminal: the run waits,
  exit 4); ``auto`` approves ``write`` effects but asks for ``irreversible`` ones; ``never``
  saves the run ``awaiting_approval`` and exits 4.
* ``plandag runs [--json]``: the runs, newest first.
* ``plandag resume RUN_ID``: continues a crashed or interrupted run (completed steps never
  run again; see :mod:`plandag.runs`).
* ``plandag approve RUN_ID [--hash H]``: approves the plan version awaiting a decision and
  runs it in the same run; ``plandag reject RUN_ID --feedback TEXT``: refuses it (exit 4).
* Escalated runs (handed to a person, see :mod:`plandag.escalation`): ``plandag inbox
  [--json]`` lists the open ones; ``plandag resume RUN_ID --instruction TEXT`` goes on with
  the person's instruction (the planner is brought back for ``run`` and ``exec --planner``
  runs); ``plandag approve RUN_ID --hash H`` runs again a step whose outcome was unknown;
  ``plandag abandon RUN_ID --reason TEXT`` ends the run ``abandoned``. Each decision is
  recorded with who (``--who``, default the login name), when and its text.

Exit codes as ARCHITECTURE.md: 0 succeeded; 1 failed, gave_up or abandoned; 2 unusable
arguments (an unknown run, a stale ``--hash``, an expired request, a decision on a run that
is not escalated); 3 timed_out or budget_exceeded; 4 awaiting_approval or rejected; 5
escalated; 130/143 interrupted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.markup import escape
from rich.text import Text

from plandag.approval import (
    ApprovalMode,
    Approver,
    InvalidDecisionError,
    StaleDecisionError,
    TerminalApprover,
    current_user,
)
from plandag.cli import common
from plandag.cli.options import ApproveOption as ApproveOption
from plandag.cli.options import EscalateOption as EscalateOption
from plandag.cli.options import RedactOption as RedactOption
from plandag.cli.options import StoreOption as StoreOption
from plandag.errors import InputError, PlanError
from plandag.scheduler.result import ESCALATION_MODES, EscalationMode, RunResult, to_jsonable
from plandag.trace.redact import scrub_secrets

if TYPE_CHECKING:
    from plandag.compiler.compiled import CompiledPlan
    from plandag.dag.plan import Plan
    from plandag.escalation import EscalationHooks
    from plandag.runs.options import DurableOutcome, RunOptions, TraceFactory
    from plandag.store import Store
    from plandag.tools.registry import Registry

__all__ = [
    "ApproveOption",
    "EscalateOption",
    "RedactOption",
    "StoreOption",
    "durable_exec",
    "register",
]

RunIdArgument = Annotated[str, typer.Argument(metavar="RUN_ID", help="The run (or an id prefix).")]
HashOption = Annotated[
    str | None,
    typer.Option(
        "--hash",
        help="The plan hash you reviewed; refused if stale. Required when more than one "
        "plan version was shown since the last decision.",
    ),
]
WhoOption = Annotated[str | None, typer.Option("--who", help="Your name.")]
RejectStepOption = Annotated[
    list[int] | None,
    typer.Option(
        "--reject-step",
        metavar="N",
        help="Approve without step N and the steps that need it (repeat for more).",
    ),
]
EditStepOption = Annotated[
    list[str] | None,
    typer.Option(
        "--edit-step",
        metavar="N=JSON",
        help="""Approve with step N's arguments changed: '2={"path": "out/b.json"}' (repeat).""",
    ),
]


def _fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` and exit with ``code`` (the CLI's convention)."""
    common.fail(message, code)


def run_options(
    settings: Any,
    limits: Any,
    *,
    tools: list[Path] | None,
    read_only: bool,
    redact: bool,
    planner: Mapping[str, Any] | None = None,
    executor: Mapping[str, Any] | None = None,
    registry: Registry | None = None,
) -> RunOptions:
    """The :class:`~plandag.runs.options.RunOptions` stored with a run, from the CLI's
    effective settings (flags over config files) and its brakes; ``registry``: the run's,
    whose MCP servers and their tools' definition hashes are recorded."""
    from plandag.runs.options import RunOptions, mcp_fields

    tool_files = tuple(str(Path(tool).resolve()) for tool in dict.fromkeys(tools or []))
    return RunOptions(
        tools=tool_files,
        tools_sha256={
            tool: digest for tool in tool_files if (digest := file_sha256(tool)) is not None
        },
        write_boundary=(tuple(settings["write_boundary"]) if settings["write_boundary"] else None),
        base=str(Path.cwd()),
        read_only=read_only,
        limits=limits.as_json(),
        retries=settings["retries"],
        max_concurrency=settings["max_concurrency"],
        max_steps=settings["max_steps"],
        approve=approve_mode(settings["approve"]),
        expiry_s=settings["approval_expiry"],
        redact=redact,
        planner=planner,
        escalate=escalate_mode(settings["escalate"]),
        http_allow=tuple(settings["http_allow"]) if settings["http_allow"] else None,
        executor=executor,
        **(mcp_fields(registry) if registry is not None else {}),
    )


def open_cli_store(path: Path | None) -> Store:
    """The store at ``path`` (default: ``$PLANDAG_STORE`` or the data folder); exit 2 with
    the reason when it cannot be opened."""
    from plandag.store import open_store

    try:
        return open_store(path)
    except InputError as error:
        _fail(str(error))


def approve_mode(value: str | None) -> ApprovalMode:
    """``--approve`` checked (default ``ask``)."""
    if value is None:
        return "ask"
    if value not in ("ask", "auto", "never"):
        _fail(f"--approve {value!r}: choose ask, auto or never")
    return value  # type: ignore[return-value]


def escalate_mode(value: str | None) -> EscalationMode:
    """``--escalate`` / setting ``escalate`` checked (default ``person``)."""
    if value is None:
        return "person"
    if value not in ESCALATION_MODES:
        _fail(f"--escalate {value!r}: choose {' or '.join(ESCALATION_MODES)}")
    return value  # type: ignore[return-value]


def terminal_approver(progress: Any = None) -> Approver | None:
    """A terminal approver when stdin is a terminal, else None (the run is then saved
    ``awaiting_approval``). ``progress``: a display to hide while asking."""
    if not sys.stdin.isatty():
        return None
    err = common.stderr
    return TerminalApprover(
        show=lambda line: err.print(line, markup=False, highlight=False),
        pause=progress.paused if progress is not None else None,
    )


def trace_factory(store: Store, redact: bool) -> TraceFactory:
    """Trace writers in ``store``'s ``traces/`` folder (secrets always masked; personal data
    too with ``redact``); live OpenTelemetry spans exported when the environment configures
    it, with no message content in them under ``redact``."""
    from plandag.trace.otel import exporter_from_env, set_redact
    from plandag.trace.redact import Redactor
    from plandag.trace.writer import TraceWriter

    redactor = Redactor(personal=redact)
    set_redact(redact)
    exporter = exporter_from_env()

    def factory(run_id: str, segment: int) -> Any:
        writer = TraceWriter(store.trace_path(run_id), run_id, segment=segment, redact=redactor)
        if exporter is not None:  # spans batched so far are sent when the writer closes
            inner_close = writer.close

            def close() -> None:
                inner_close()
                exporter.flush()

            writer.close = close  # type: ignore[method-assign]
        return writer

    return factory


def result_document(
    result: RunResult | None, status: str, run_id: str, store_path: Path
) -> dict[str, Any]:
    """The JSON document ``--json`` prints for a durable run: the result's JSON
    (:meth:`~plandag.scheduler.result.RunResult.to_json_dict`) with the run's ``status``,
    ``run_id`` and ``store`` (the database's path)."""
    document: dict[str, Any] = result.to_json_dict() if result is not None else {}
    document["status"] = status
    document["run_id"] = run_id
    document["store"] = str(store_path)
    return document


def json_at_deadline(
    store_path: Path, more: Callable[[RunResult], Mapping[str, Any]] | None = None
) -> Callable[[RunResult], None]:
    """What ``--json`` prints when the deadline guard ends the process (a step ignored
    cancellation: :func:`plandag.cli.watchdog.deadline_guard`): the run's document, as
    :func:`report` prints it, saying why the process ended; ``more(result)``: keys a
    command adds (``plandag run``: :func:`planned_at_deadline`)."""

    def write(result: RunResult) -> None:
        document = result_document(result, result.status, result.run_id, store_path)
        if more is not None:
            document.update(more(result))
        steps = sorted(record.id for record in result.steps.values() if record.reason == "deadline")
        document["message"] = (
            "the run passed its wall-clock cap and a step ignored cancellation; the process "
            "ended without waiting for it"
            + (f" (steps stopped at the deadline: {', '.join(map(str, steps))})" if steps else "")
        )
        document = scrub_secrets(document)
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")

    return write


def planned_at_deadline(store_path: Path) -> Callable[[RunResult], dict[str, Any]]:
    """What a planned run (``plandag run``) adds to its ``--json`` document at the deadline
    (:func:`json_at_deadline`): ``answer`` None (nothing is made up) and ``plan_versions``,
    the plan versions in the store (verbose Plan JSON), read through a connection of its
    own (the run's loop may be blocked inside a tool); [] when the store cannot be read."""

    def more(result: RunResult) -> dict[str, Any]:
        import sqlite3

        versions: list[dict[str, Any]] = []
        try:
            connection = sqlite3.connect(store_path, timeout=2.0)
            try:
                rows = connection.execute(
                    "SELECT version, plan FROM plan_version WHERE run_id = ? ORDER BY version",
                    (result.run_id,),
                ).fetchall()
            finally:
                connection.close()
            versions = [{"version": number, **json.loads(plan)} for number, plan in rows]
        except (sqlite3.Error, ValueError, TypeError):
            versions = []
        return {"answer": None, "plan_versions": versions}

    return more


def report(outcome: DurableOutcome, *, as_json: bool, store: Store) -> None:
    """Print a durable run's outcome (the run table, or the decision it waits for) and
    exit with its code."""
    outcome = _with_case_stored(outcome, store)
    result = outcome.result
    if as_json:
        document = result_document(result, outcome.status, outcome.run_id, store.path)
        if outcome.request is not None:
            document["approval"] = {
                "version": outcome.request.version,
                "plan_hash": outcome.request.plan_hash,
                "reason": outcome.request.reason,
                "expires_at": outcome.request.expires_at,
                "estimate": (
                    outcome.request.estimate.as_json()
                    if outcome.request.estimate is not None
                    else None
                ),
                "estimate_text": (
                    outcome.request.estimate.describe()
                    if outcome.request.estimate is not None
                    else None
                ),
            }
        if outcome.escalation is not None:
            document["escalation"] = outcome.escalation
            document["escalation_detail"] = outcome.escalation_detail
        if outcome.message:
            document["message"] = outcome.message
        if outcome.store_error is not None:
            document["store_error"] = outcome.store_error
        document = scrub_secrets(document)  # values under secret-named keys too
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
    else:
        if result is not None:
            from plandag.cli.display import run_table

            common.stdout.print(run_table(result, console_width=common.stdout.width))
            common.print_progress(result)
            if result.output is not None:
                common.stdout.print_json(
                    json.dumps(scrub_secrets(to_jsonable(result.output)), ensure_ascii=False)
                )
        if outcome.request is not None and outcome.status == "awaiting_approval":
            for line in outcome.request.summary_lines():
                common.stderr.print(line, markup=False, highlight=False)
        if outcome.message:
            common.stderr.print(outcome.message, markup=False, highlight=False)
        common.stderr.print(f"run {outcome.run_id} ({outcome.status}); store {store.path}")
    if outcome.store_error is not None:
        common.stderr.print(f"[red]error:[/] {escape(outcome.store_error)}")
        raise typer.Exit(1)
    raise typer.Exit(common.EXIT_CODES.get(outcome.status, 1))


def escalation_hooks(settings: Any) -> EscalationHooks:
    """The escalation hooks of the effective settings (``escalation_command``,
    ``escalation_url`` with ``http_allow``, ``escalation_timeout``); exit 2 when the
    command line cannot be split."""
    from plandag.escalation import EscalationHooks

    try:
        return EscalationHooks.from_settings(settings)
    except ValueError as error:
        _fail(f"{error}; fix it in plandag.toml or [tool.plandag]")


def _with_case_stored(outcome: DurableOutcome, store: Store) -> DurableOutcome:
    """An escalated outcome whose case is not in the store yet (a code path that ended the
    run escalated without :func:`plandag.runs.escalations.escalate_run`) gets it stored now,
    with the configured hooks called, so that every escalated run reaches the inbox."""
    if outcome.status != "escalated" or store.escalations(run_id=outcome.run_id):
        return outcome
    import dataclasses
    import functools

    import anyio

    from plandag.runs.escalations import escalate_run

    result = outcome.result
    reason = outcome.escalation or (result.escalation if result is not None else None)
    detail = outcome.escalation_detail or (result.escalation_detail if result is not None else None)
    reason = reason or "replan_caps"
    message = anyio.run(
        functools.partial(
            escalate_run,
            store,
            outcome.run_id,
            reason,
            detail,
            hooks=escalation_hooks(common.command_settings({})),
        )
    )
    return dataclasses.replace(
        outcome,
        message=outcome.message or message,
        escalation=reason,
        escalation_detail=detail,
    )


def durable_exec(
    compiled: CompiledPlan,
    options: RunOptions,
    *,
    store_path: Path | None,
    observers: list[Any],
    progress: Any,
    as_json: bool,
    compile_span: tuple[float, float] | None = None,
    hooks: EscalationHooks | None = None,
) -> None:
    """``exec`` through the store and the approval gate (never returns: exits).
    ``compile_span``: when the plan's compile started and ended (seconds since the epoch),
    for the trace; ``hooks``: called when the run escalates."""
    from plandag.cli.signals import Interruptible, exit_code_for_signal
    from plandag.runs.segments import start_run

    store = open_cli_store(store_path)
    approver = terminal_approver(progress) if options.approve == "ask" else None
    factory = trace_factory(store, options.redact)

    async def work() -> DurableOutcome:
        return await start_run(
            store,
            compiled,
            options,
            command="exec",
            approver=approver,
            observers=observers,
            trace=factory,
            compile_span=compile_span,
            on_escalation=hooks,
        )

    from plandag.cli.watchdog import deadline_guard

    try:
        with (
            progress,
            deadline_guard(store.path, json_at_deadline(store.path) if as_json else None),
        ):
            outcome = Interruptible(work).run()
    except (StaleDecisionError, InvalidDecisionError) as error:
        _fail(str(error))
    done = outcome.result
    if done is None:
        _fail("the run was interrupted before it could report", 130)
    try:
        if outcome.signal is not None:
            _quiet_report(done, as_json=as_json, store=store)
            raise typer.Exit(exit_code_for_signal(outcome.signal))
        report(done, as_json=as_json, store=store)
    finally:
        store.close()


def _quiet_report(outcome: DurableOutcome, *, as_json: bool, store: Store) -> None:
    with contextlib.suppress(typer.Exit):
        report(outcome, as_json=as_json, store=store)


def _stored_run(store: Store, text: str) -> tuple[str, Any]:
    try:
        run_id = store.resolve_run_id(text)
        return run_id, store.run(run_id)
    except InputError as error:
        _fail(str(error))


def job_registry(row: Any, options: RunOptions) -> Registry:
    """The registry a later segment of a stored run compiles and plans with: a research
    run's is its job's (the ``research`` tools, no other installed application, the file
    and HTTP built-ins withheld, as its first segment had them; a run stored before
    ``withheld_tools`` was recorded gets them withheld all the same), any other run's the
    built-ins and the installed applications; the run's ``--tools`` and the MCP servers it
    started (``options.mcp``, started again under the same names) either way. Exits 2 when
    a tools entry cannot be loaded or a server does not start."""
    tools = [Path(tool) for tool in options.tools]
    if row.command == "research":
        from plandag.jobs.research.planning import withheld_tools

        return common.command_registry(
            tools,
            applications=("research",),
            resolve_installed=False,
            withhold=options.withheld_tools or withheld_tools(),
            servers=options.mcp,
        )
    return common.command_registry(tools, withhold=options.withheld_tools, servers=options.mcp)


def run_options_of(row: Any, run_id: str, base_url: str | None = None) -> RunOptions:
    """The run's stored options, its model server's URL whole again: given again
    (``--base-url``), or its user and password put back from the environment
    (:func:`plandag.store.base_urls.restored_model_options`); exit 2 saying what to give
    when neither can."""
    from plandag.runs.options import RunOptions
    from plandag.store.base_urls import restored_model_options

    try:
        return RunOptions.from_json(restored_model_options(row.options, base_url, run_id=run_id))
    except InputError as error:
        _fail(str(error))


def _rebuild(
    store: Store,
    run_id: str,
    row: Any,
    base_url: str | None = None,
    *,
    options: RunOptions | None = None,
) -> tuple[CompiledPlan, RunOptions]:
    """The run's current plan version compiled again with its stored tools, params and
    boundary. Its options: ``options`` when given (made already), else the stored ones
    (``base_url``: the model server's URL given again, :func:`run_options_of`)."""
    from plandag.compiler import compile_plan
    from plandag.store.sealing import unseal
    from plandag.tools.boundary import WriteBoundary

    if options is None:
        options = run_options_of(row, run_id, base_url)
    registry = job_registry(row, options)
    versions = store.plan_versions(run_id)
    if not versions:
        _fail(f"run {run_id} has no plan in {store.path}")
    specs = options.write_boundary if options.write_boundary is not None else [options.base]
    try:
        boundary = WriteBoundary.from_specs(specs, options.base)
        # The store keeps secrets as references to the environment: put them back.
        compiled = compile_plan(
            unseal(versions[-1].plan, run_id=run_id),
            registry,
            params=unseal(row.params, run_id=run_id),
            read_only=options.read_only,
            write_boundary=boundary,
            http_allow=options.http_allow,
            max_steps=options.max_steps,
        )
    except InputError as error:
        _fail(str(error))
    except (PlanError, ValueError) as error:
        _fail(f"run {run_id}: its stored plan does not compile any more: {error}")
    from plandag.executors.access import model_steps, require_key

    if model_steps(compiled.steps):
        executor = dict(options.executor or {"provider": "anthropic"})
        try:  # the model steps' key, before anything runs
            require_key(str(executor.get("provider")), executor.get("base_url"))
        except InputError as error:
            _fail(f"run {run_id}: its plan has llm or agent steps: {error}")
        if options.executor is None:
            options = dataclasses.replace(options, executor=executor)
    return compiled, options


def _prepare(
    store: Store, run_id: str, row: Any, command: str, base_url: str | None = None
) -> tuple[CompiledPlan, RunOptions]:
    """Everything a resume or an approval needs before it takes the run: the run's own
    folder (relative paths in the plan mean what they meant when it was made), its tools
    files unchanged since the plan was made (a person approved the plan with that code),
    and its current plan version compiled again, its model server's URL whole
    (``base_url``: given again). Fails (exit 2) with nothing recorded."""
    from plandag.runs.options import RunOptions

    options = RunOptions.from_json(row.options)
    try:
        os.chdir(options.base)
    except OSError as error:
        _fail(
            f"run {run_id}: cannot work in its folder {options.base} ({error}); restore the "
            f"folder, then run `plandag {command} {run_id}` again"
        )
    for tool_file, expected in options.tools_sha256.items():
        current = file_sha256(tool_file)
        if current is None:
            _fail(
                f"run {run_id}: its tools file {tool_file} is missing; restore it, then run "
                f"`plandag {command} {run_id}` again"
            )
        if current != expected:
            _fail(
                f"run {run_id}: its tools file {tool_file} changed since the plan was made "
                f"(sha256 {expected[:12]}... -> {current[:12]}...): the plan was made and "
                "approved for the old code; restore the file, or start a new run"
            )
    from plandag.runs.options import changed_mcp_tools

    prepared = _rebuild(store, run_id, row, base_url)
    changed = changed_mcp_tools(*prepared)
    if changed is not None:
        _fail(f"run {run_id}: {changed}")
    return prepared


def file_sha256(path: str) -> str | None:
    """SHA-256 (hex) of a file's bytes, or None when it cannot be read."""
    import hashlib

    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _continue(
    store: Store,
    run_id: str,
    prepared: tuple[CompiledPlan, RunOptions],
    *,
    command: str,
    approve: str | None,
    approved_unknown: bool,
    as_json: bool,
    hooks: EscalationHooks | None = None,
) -> None:
    from plandag.cli.signals import Interruptible, exit_code_for_signal
    from plandag.runs.segments import continue_run

    compiled, options = prepared
    if approve is not None:
        import dataclasses

        options = dataclasses.replace(options, approve=approve_mode(approve))
    settings = common.command_settings({})
    if hooks is None:
        hooks = escalation_hooks(settings)
    progress, observers = common.progress_observers(compiled, settings)
    approver = terminal_approver(progress) if options.approve == "ask" else None
    factory = trace_factory(store, options.redact)

    async def work() -> DurableOutcome:
        return await continue_run(
            store,
            run_id,
            compiled,
            options,
            command=command,
            approver=approver,
            approved_unknown=approved_unknown,
            observers=observers,
            trace=factory,
            on_escalation=hooks,
        )

    from plandag.cli.watchdog import deadline_guard

    print_stored_brakes(options)
    try:
        with (
            progress,
            deadline_guard(store.path, json_at_deadline(store.path) if as_json else None),
        ):
            outcome = Interruptible(work).run()
    except (StaleDecisionError, InvalidDecisionError, InputError) as error:
        _fail(str(error))
    done = outcome.result
    if done is None:
        _fail("the run was interrupted before it could report", 130)
    library_after_continue(store, run_id, compiled, options)
    if outcome.signal is not None:
        _quiet_report(done, as_json=as_json, store=store)
        raise typer.Exit(exit_code_for_signal(outcome.signal))
    report(done, as_json=as_json, store=store)


def library_after_continue(
    store: Store,
    run_id: str,
    compiled: CompiledPlan,
    options: RunOptions,
    *,
    plan: Plan | None = None,
    tainted: tuple[int, ...] = (),
    replanned: bool = False,
) -> None:
    """Bring the plan library up to date with a ``plandag run`` that went through it and
    was finished now by ``plandag approve`` or ``plandag resume``: its use counted with the
    final status, its plan (``plan``, default the compiled one) saved by the admission rule
    (:func:`plandag.library.stored.finish_stored_run`); what was done on stderr. Runs that
    did not go through the library are left alone."""
    from plandag.library.stored import finish_stored_run

    store.flush()
    registry = common.command_registry([Path(tool) for tool in options.tools], servers=options.mcp)
    finished = finish_stored_run(
        store,
        run_id,
        plan=plan if plan is not None else compiled.plan,
        registry=registry,
        params=compiled.params,
        approve=options.approve,
        read_only=options.read_only,
        write_boundary=compiled.write_boundary,
        http_allow=options.http_allow,
        max_steps=options.max_steps,
        tainted=tainted,
        replanned=replanned,
    )
    if finished is not None:
        for line in finished.lines():
            common.stderr.print(line, markup=False, highlight=False)


def print_stored_brakes(options: RunOptions) -> None:
    """Print the brakes a stored run continues under (``resume``, ``approve``) on stderr,
    one line, as ``exec`` and ``run`` print theirs at the start."""
    from plandag.brakes import brakes_line

    limits = options.run_limits()
    specs = list(options.write_boundary) if options.write_boundary else None
    common.stderr.print(
        brakes_line(
            max_cost_usd=limits.max_cost_usd,
            max_tokens=limits.max_tokens,
            max_seconds=limits.max_seconds,
            stall_after=limits.stall_after,
            stop_on_stall=limits.stop_on_stall,
            boundary=common.boundary_words(specs, Path.cwd()),
        ),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


BaseUrlAgainOption = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        metavar="URL",
        help="The run's model server URL given again with its user and password "
        "(http://<user>:<password>@host/): the run store keeps the URL without them.",
    ),
]


def register(app: typer.Typer) -> None:
    """Add ``runs``, ``resume``, ``approve``, ``reject``, ``abandon`` and ``inbox`` to the
    ``plandag`` app."""

    @app.command("runs")
    def runs_command(
        store_path: StoreOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
        limit: Annotated[
            int, typer.Option("--limit", min=1, help="At most this many runs (newest).")
        ] = 50,
    ) -> None:
        """List the runs in the store, newest first, with their ids and states."""
        store = open_cli_store(store_path)
        rows = store.runs(limit)
        reasons = {case.run_id: case.reason for case in store.escalations()}
        if as_json:
            document = [
                {
                    "run_id": row.run_id,
                    "status": row.status,
                    "state": "crashed" if _process_gone(row) else row.status,
                    "process_gone": _process_gone(row),
                    "command": row.command,
                    "goal": _shown_goal(row.goal),
                    "created": row.created,
                    "updated": row.updated,
                    "version": row.version,
                    "segment": row.segment,
                    "spent_usd": row.spent_usd,
                    "spent_tokens": row.spent_tokens,
                    "awaiting_reason": row.awaiting_reason,
                    "expires_at": row.expires_at,
                    "escalation": reasons.get(row.run_id) if row.status == "escalated" else None,
                    "detail": row.detail if row.status in ("escalated", "abandoned") else None,
                }
                for row in rows
            ]
            sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
            return
        from rich.table import Table

        table = Table(title=f"runs in {store.path}")
        table.add_column("run id", no_wrap=True, min_width=16)
        table.add_column("status", no_wrap=True)
        for column in ("command", "started", "goal"):
            table.add_column(column)
        for row in rows:
            table.add_row(
                Text(row.run_id),
                Text(_shown_status(row, reasons.get(row.run_id))),
                Text(row.command),
                Text(_when(row.created)),
                Text(_shown_goal(row.goal)[:60]),
            )
        common.stdout.print(table)
        if not rows:
            common.stderr.print("no runs yet")
        elif len(rows) == limit:
            common.stderr.print(f"the {limit} newest runs; --limit N shows more")

    @app.command("resume")
    def resume_command(
        run: RunIdArgument,
        store_path: StoreOption = None,
        approve: ApproveOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
        instruction: Annotated[
            str | None,
            typer.Option(
                "--instruction",
                metavar="TEXT",
                help="For an escalated run: what the planner should do now; it reaches the "
                "replanner verbatim, and the replan caps start again.",
            ),
        ] = None,
        escalate: EscalateOption = None,
        who: WhoOption = None,
        provider: Annotated[
            str | None,
            typer.Option(
                "--provider",
                metavar="anthropic|openai",
                help="Point the run at another model provider (default: the run's own).",
            ),
        ] = None,
        model: Annotated[
            str | None,
            typer.Option(
                "--model", metavar="NAME", help="Point the run at another model (the planner's)."
            ),
        ] = None,
        base_url: Annotated[
            str | None,
            typer.Option(
                "--base-url",
                metavar="URL",
                help="Point the run at another API base URL; or the run's own URL given "
                "again with its user and password (the run store keeps it without them).",
            ),
        ] = None,
    ) -> None:
        """Continue a crashed or interrupted run: completed steps never run again; a step
        whose outcome is unknown runs again only if its tool is idempotent or takes the
        idempotency key, else a person decides (exit 4; an irreversible one escalates,
        exit 5).

        An escalated run (see `plandag inbox`) goes on with your instruction: for a run
        made by `plandag run` or `exec --planner`, the planner is brought back and replans
        the remaining work with --instruction TEXT (verbatim), completed steps kept, the
        replan caps fresh. The escalation is closed (who, when, the instruction) once the
        model took the instruction; when the model cannot be reached the run stays
        escalated and its case open (exit 5): try again, or point the run at another
        endpoint with --provider, --model, --base-url (each defaults to the run's own; the
        run keeps the new endpoint once it goes on; its llm and agent steps follow). A
        `plandag research` run gets its corpus back and its report written again.

        A run started with --base-url http://<user>:<password>@host/ takes the user and
        password from the environment variable that held the password, or from --base-url
        given again (the run store keeps the URL without them)."""
        store = open_cli_store(store_path)
        run_id, row = _stored_run(store, run)
        if instruction is not None and not instruction.strip():
            _fail("--instruction is empty: say what the planner should do now")
        endpoint = Endpoint.given_for(row, provider, model, base_url)
        with _job_segment(store, run_id, row):
            _resume(store, run_id, row, approve, instruction, escalate, who, as_json, endpoint)

    def _resume(
        store: Store,
        run_id: str,
        row: Any,
        approve: str | None,
        instruction: str | None,
        escalate: str | None,
        who: str | None,
        as_json: bool,
        endpoint: Endpoint,
    ) -> None:
        from plandag.runs.options import RESUMABLE

        if row.status == "escalated":
            _resume_escalated(
                store,
                run_id,
                row,
                instruction=instruction,
                approve=approve,
                escalate=escalate,
                who=who or current_user(),
                as_json=as_json,
                endpoint=endpoint,
            )
        if instruction is not None:
            _fail(
                f"run {run_id} is {row.status}, not escalated: --instruction is for a run "
                f"handed to a person (`plandag inbox` lists them); `plandag resume {run_id}` "
                "continues this one as it is"
            )
        if row.status == "awaiting_approval":
            _fail(
                f"run {run_id} awaits a decision ({row.awaiting_reason}); use "
                f"`plandag approve {run_id}` or `plandag reject {run_id} --feedback TEXT`"
            )
        if row.status not in RESUMABLE:
            _fail(f"run {run_id} ended {row.status}; there is nothing to resume")
        if row.status == "running" and not _process_gone(row):
            _fail(
                f"run {run_id} is still running in process {row.pid}; stop it first "
                "(Ctrl-C ends it interrupted) or wait"
            )
        # Taken before anything is read: a run held by a live process is never deleted by
        # gc, so the plan read next is still there.
        if not store.claim_run(run_id, sorted(RESUMABLE), row.pid):
            if not _still_stored(store, run_id):
                _fail(
                    f"run {run_id} was deleted from {store.path} (`plandag gc`) before it "
                    "could be resumed"
                )
            _fail(f"run {run_id}: another process resumed it first; `plandag runs` shows it")
        try:
            prepared = _with_escalate(
                _prepare(store, run_id, endpoint.row(row), "resume", endpoint.again), escalate
            )
            prepared = prepared[0], endpoint.apply(run_id, prepared[1])
        except BaseException:  # not resumed after all: give the run back as it was
            store.update_run(run_id, status=row.status, pid=row.pid, pid_started=row.pid_started)
            raise
        endpoint.keep(store, run_id, row, prepared[1])
        _continue(
            store,
            run_id,
            prepared,
            command="resume",
            approve=approve,
            approved_unknown=False,
            as_json=as_json,
        )

    @app.command("approve")
    def approve_command(
        run: RunIdArgument,
        plan_hash: HashOption = None,
        store_path: StoreOption = None,
        who: WhoOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
        reject_step: RejectStepOption = None,
        edit_step: EditStepOption = None,
        feedback: Annotated[
            str | None,
            typer.Option(
                "--feedback", help="Why steps were rejected (a planner, if any, gets it)."
            ),
        ] = None,
        base_url: BaseUrlAgainOption = None,
    ) -> None:
        """Approve the plan awaiting a decision and run it now, in the same run.

        Step by step: --reject-step N drops step N and every step after it that needs it;
        --edit-step 'N={"path": "out/b.json"}' gives step N new argument values (the
        object's keys replace those arguments). Both make a new plan version, with its own
        hash, approved by you in the same decision (shown on stderr).

        On an escalated run whose step's outcome was unknown (an irreversible effect that
        may have happened before the run stopped): once you checked what happened, run that
        step again with --hash H (the plan hash `plandag inbox` shows)."""
        from plandag.runs.decisions import approve_escalated, decide

        store = open_cli_store(store_path)
        run_id, row = _stored_run(store, run)
        if row.status == "escalated":
            if reject_step or edit_step:
                _fail(
                    f"run {run_id} is escalated: --reject-step and --edit-step decide on a plan "
                    f"awaiting approval; `plandag resume {run_id} --instruction TEXT` asks "
                    "the planner for another plan"
                )
            for_escalated = _prepare(store, run_id, row, "approve", base_url)
            decider = who or current_user()
            try:
                digest = approve_escalated(store, run_id, who=decider, expected_hash=plan_hash)
            except (StaleDecisionError, InputError) as error:
                _fail(str(error))
            _trace_decision(store, store.run(run_id), digest, "approved", decider, None).close()
            _continue(
                store,
                run_id,
                for_escalated,
                command="approve",
                approve=None,
                approved_unknown=True,
                as_json=as_json,
            )
            return
        if row.status == "running":
            _fail(
                f"run {run_id} is running in process {row.pid} (it may be asking at its "
                "terminal); decide there, or wait"
                if not _process_gone(row)
                else f"run {run_id} crashed while running; `plandag resume {run_id}` goes on"
            )
        prepared = (
            _prepare(store, run_id, row, "approve", base_url)
            if row.status == "awaiting_approval"
            else None
        )
        edits = _parse_edits(edit_step or [])
        decider = who or current_user()
        try:
            digest = decide(
                store,
                run_id,
                approved=True,
                who=decider,
                feedback=feedback or "",
                expected_hash=plan_hash,
                reject_steps=tuple(reject_step or ()),
                edit_steps=edits,
                compiled=prepared[0] if prepared is not None else None,
            )
        except (StaleDecisionError, InvalidDecisionError, InputError) as error:
            _fail(str(error))
        assert prepared is not None
        row = store.run(run_id)
        if reject_step or edits:
            _trace_amendment(store, row, decider, feedback)
            prepared = _rebuild(store, run_id, row, base_url)  # the version the choices made
            common.stderr.print(
                f"run {run_id}: step choices made plan version {row.version} "
                f"(hash {digest}), approved by {decider}",
                markup=False,
                highlight=False,
            )
        else:
            _trace_decision(store, row, digest, "approved", decider, None).close()
        _continue(
            store,
            run_id,
            prepared,
            command="approve",
            approve=None,
            approved_unknown=True,
            as_json=as_json,
        )

    @app.command("reject")
    def reject_command(
        run: RunIdArgument,
        feedback: Annotated[
            str, typer.Option("--feedback", help="Why; it reaches the planner in full.")
        ],
        plan_hash: HashOption = None,
        store_path: StoreOption = None,
        who: WhoOption = None,
        base_url: BaseUrlAgainOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
    ) -> None:
        """Reject the plan awaiting a decision, with feedback for the planner (exit 4).

        A run started by `plandag run` goes back to its planner with the feedback, in
        full, as the instruction for a revision; the revised plan then awaits a decision.
        --json prints ``{"run_id", "decision": "rejected", "plan_hash", "who",
        "feedback", "status", "revision"}``: ``status`` is the run's state after it,
        ``revision`` the revised plan awaiting a decision (``version``, ``plan_hash``)
        or None.
        """
        from plandag.runs.decisions import decide
        from plandag.runs.options import RunOptions

        if not feedback.strip():
            _fail("--feedback is empty: say why, in words the planner can act on")
        store = open_cli_store(store_path)
        run_id, before = _stored_run(store, run)
        stored = RunOptions.from_json(before.options)
        if stored.planner is not None and before.command == "run":
            run_options_of(before, run_id, base_url)  # the planner's URL, before deciding
        try:
            digest = decide(
                store,
                run_id,
                approved=False,
                who=who or current_user(),
                feedback=feedback,
                expected_hash=plan_hash,
            )
        except (StaleDecisionError, InputError) as error:
            _fail(str(error))
        row = store.run(run_id)
        options = RunOptions.from_json(row.options)
        if options.planner is not None and row.command == "run":
            options = run_options_of(row, run_id, base_url)
        decider = who or current_user()
        with _trace_decision(store, row, digest, "rejected", decider, feedback) as writer:
            if options.planner is not None and row.command == "run":
                from plandag.cli.agent_store import revise

                revise(store, run_id, row, options, writer)
        common.stderr.print(f"run {run_id} rejected (plan hash {digest})")
        if as_json:
            after = store.run(run_id)
            latest = store.plan_versions(run_id)[-1]
            revision = (
                {"version": latest.version, "plan_hash": latest.hash}
                if after.status == "awaiting_approval"
                and latest.source == "revision"
                and latest.hash != digest
                else None
            )
            document = {
                "run_id": run_id,
                "decision": "rejected",
                "plan_hash": digest,
                "who": decider,
                "feedback": feedback,
                "status": after.status,
                "revision": revision,
            }
            sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
        raise typer.Exit(4)

    @app.command("abandon")
    def abandon_command(
        run: RunIdArgument,
        reason: Annotated[
            str, typer.Option("--reason", metavar="TEXT", help="Why the run is given up.")
        ],
        store_path: StoreOption = None,
        who: WhoOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
    ) -> None:
        """Close an escalated run for good: its state becomes abandoned (exit 1) and it
        leaves the inbox; the decision is recorded with who, when and the reason.
        --json prints ``{"run_id", "status": "abandoned", "who", "reason"}``."""
        from plandag.runs.decisions import abandon

        store = open_cli_store(store_path)
        run_id, _ = _stored_run(store, run)
        decider = who or current_user()
        try:
            abandon(store, run_id, who=decider, reason=reason)
        except InputError as error:
            _fail(str(error))
        common.stderr.print(
            f"run {run_id} abandoned by {decider}: {reason}", markup=False, highlight=False
        )
        if as_json:
            document = {"run_id": run_id, "status": "abandoned", "who": decider, "reason": reason}
            sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
        raise typer.Exit(common.EXIT_CODES["abandoned"])

    @app.command("inbox")
    def inbox_command(
        store_path: StoreOption = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
    ) -> None:
        """List the escalated runs waiting for a person, and the crashed runs (their
        process died while running them), oldest first: why, since when, the goal, the
        spend, and the commands that close each one (resume, with an instruction for an
        escalated run; approve a step whose outcome was unknown; abandon)."""
        store = open_cli_store(store_path)
        cases = store.escalations()
        items = [_inbox_item(case) for case in cases]
        items += [_crashed_item(store, row) for row in store.crashed_runs()]
        items.sort(key=lambda item: item["time"])
        if as_json:
            sys.stdout.write(json.dumps(items, ensure_ascii=False, indent=2) + "\n")
            return
        out = common.stdout
        if not items:
            common.stderr.print(f"no open escalations or crashed runs in {store.path}")
            return
        for item in items:
            spend = item["spend"]
            what = "crashed" if item["reason"] == "crashed" else "escalated"
            out.print(
                f"run {item['run_id']}  {what} {_when(item['time'])}  ({item['reason']})",
                markup=False,
                highlight=False,
            )
            out.print(f"  goal: {item['goal'] or '-'}", markup=False, highlight=False)
            if item["detail"]:
                out.print(f"  why: {item['detail']}", markup=False, highlight=False)
            out.print(
                f"  spent: ${spend['usd']:.4f}, {spend['tokens']} tokens",
                markup=False,
                highlight=False,
            )
            actions = [command for command in item["actions"].values() if command]
            out.print(f"  do: {actions[0]}", markup=False, highlight=False)
            for command in actions[1:]:
                out.print(f"      {command}", markup=False, highlight=False)


def _crashed_item(store: Store, row: Any) -> dict[str, Any]:
    """A crashed run as ``plandag inbox --json`` lists it (reason ``crashed``): its process
    died while running it, and ``plandag resume`` goes on with it."""
    versions = store.plan_versions(row.run_id)
    return {
        "run_id": row.run_id,
        "reason": "crashed",
        "detail": (
            f"its process {row.pid} died while running it; steps it completed are kept, "
            "and resume runs the rest (a step whose outcome is unknown runs again only if "
            "it is idempotent or keyed, else a person decides)"
        ),
        "time": row.updated,
        "goal": _shown_goal(row.goal),
        "command": row.command,
        "spend": {"usd": row.spent_usd, "tokens": row.spent_tokens},
        "plan_hash": versions[-1].hash if versions else None,
        "actions": {
            "resume": f"plandag resume {row.run_id}",
            "approve": None,
            "abandon": None,
        },
    }


def _inbox_item(case: Any) -> dict[str, Any]:
    """One open escalation as ``plandag inbox --json`` lists it."""
    context = case.context
    return {
        "run_id": case.run_id,
        "reason": case.reason,
        "detail": context.get("detail"),
        "time": case.time,
        "goal": _shown_goal(context.get("goal")),
        "command": context.get("command"),
        "spend": context.get("spend") or {"usd": 0.0, "tokens": 0},
        "plan_hash": (context.get("plan_versions") or [{}])[-1].get("hash"),
        "actions": context.get("actions")
        or {
            "resume": f"plandag resume {case.run_id} --instruction TEXT",
            "approve": None,
            "abandon": f"plandag abandon {case.run_id} --reason TEXT",
        },
    }


def _job_segment(store: Store, run_id: str, row: Any) -> contextlib.AbstractContextManager[Any]:
    """What a job needs around a later segment of its run: a research run's corpus bound
    and its report written again at the end
    (:func:`plandag.cli.research_command.research_segment`); nothing for other runs."""
    if row.command == "research" and row.status not in ("succeeded", "failed", "cancelled"):
        from plandag.cli.research_command import research_segment

        return research_segment(store, run_id, row)
    return contextlib.nullcontext()


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """``plandag resume --provider --model --base-url``: the model endpoint a resumed run is
    pointed at; each value left out keeps the run's own.

    Attributes:
        provider: ``anthropic`` or ``openai``, or None.
        model: the planner's model (and the model steps' with ``openai``), or None.
        base_url: the API's base URL, or None.
    """

    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    again: str | None = None

    @classmethod
    def given_for(
        cls, row: Any, provider: str | None, model: str | None, base_url: str | None
    ) -> Endpoint:
        """The endpoint of ``resume``'s options for the stored run ``row``: a ``--base-url``
        that is the run's own model server (user and password aside) is that URL given
        again (``again``: :func:`run_options_of`), not a move; another one without a user
        and password points the run there. One with a user and password must be the run's
        own (so a mistyped host never gets them): exit 2 otherwise."""
        from plandag.store.base_urls import split_userinfo

        if base_url is None:
            return cls(provider, model, None)
        own = sorted(
            {
                split_userinfo(str(section["base_url"]))[0].rstrip("/")
                for name in ("planner", "executor")
                if isinstance(section := row.options.get(name), Mapping) and section.get("base_url")
            }
        )
        bare, userinfo = split_userinfo(base_url)
        if bare.rstrip("/") in own:
            return cls(provider, model, None, again=base_url)
        if userinfo is not None:
            servers = ", ".join(own) if own else "(its provider's own API)"
            _fail(
                f"--base-url {bare} is not the run's model server {servers}: a URL with a "
                "user and password is the run's own given again; to point the run at "
                "another server, give that server's URL without them"
            )
        return cls(provider, model, base_url)

    @property
    def given(self) -> bool:
        """Whether the run is pointed elsewhere (a provider, a model or another URL)."""
        return (self.provider, self.model, self.base_url) != (None, None, None)

    def row(self, row: Any) -> Any:
        """``row`` as the run's options are read for this resume: when the run moves to
        another base URL, what its old URL's user and password were is left out (they are
        not needed any more, and an environment that lost them must not stop the move)."""
        if self.base_url is None:
            return row
        from plandag.store.base_urls import CREDENTIALS_KEY

        options = dict(row.options)
        for name in ("planner", "executor"):
            section = options.get(name)
            if isinstance(section, Mapping) and CREDENTIALS_KEY in section:
                options[name] = {k: v for k, v in section.items() if k != CREDENTIALS_KEY}
        return dataclasses.replace(row, options=options)

    def apply(self, run_id: str, options: RunOptions) -> RunOptions:
        """``options`` with the planner and the model steps (``executor``) pointed here.

        A new provider without ``--model`` takes that provider's default model (openai has
        none: exit 2), its own base URL unless ``--base-url`` is given, and the model
        steps' default executor model. Exit 2 when the run calls no model at all, or the
        provider is unknown.
        """
        if not self.given:
            return options
        from plandag.cli.models_options import DEFAULT_MODELS, PROVIDERS
        from plandag.executors.access import executor_model_for

        if options.planner is None and options.executor is None:
            _fail(
                f"run {run_id} calls no model (no planner, no llm or agent step): "
                "--provider, --model and --base-url do not apply to it"
            )
        if self.provider is not None and self.provider not in PROVIDERS:
            _fail(f"--provider {self.provider!r}: choose anthropic or openai")
        planner: dict[str, Any] | None = None
        executor: dict[str, Any] | None = None
        if options.planner is not None:
            planner, changed = self._moved(options.planner)
            name = self.model or (
                DEFAULT_MODELS.get(str(planner["provider"])) if changed else planner.get("model")
            )
            if not name:
                _fail(f"--model is required with --provider {planner['provider']}")
            planner["model"] = name
        if options.executor is not None:
            executor, changed = self._moved(options.executor)
            if self.model is not None:
                executor["model"] = self.model
            elif changed:
                executor["model"] = planner["model"] if planner is not None else None
            if changed:
                executor["executor_model"] = None  # the new provider's default
            try:
                executor_model_for(
                    str(executor["provider"]), executor.get("model"), executor.get("executor_model")
                )
            except InputError as error:
                _fail(f"run {run_id}: its plan has llm or agent steps: {error}")
        return dataclasses.replace(options, planner=planner, executor=executor)

    def _moved(self, current: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
        """``current`` (a stored planner or executor) with the provider and base URL given;
        whether the provider changed."""
        updated = dict(current)
        old = str(updated.get("provider") or "anthropic")
        new = self.provider or old
        updated["provider"] = new
        if self.base_url is not None:
            updated["base_url"] = self.base_url
        elif new != old:
            updated["base_url"] = None  # the new provider's own API
        return updated, new != old

    def keep(self, store: Store, run_id: str, row: Any, options: RunOptions) -> None:
        """Store the endpoint in the run's options (the run goes on with it; later resumes
        and approvals use it); nothing when none was given."""
        if not self.given:
            return
        from plandag.store.base_urls import stored_model_options

        stored = dict(row.options)
        stored["planner"] = dict(options.planner) if options.planner is not None else None
        stored["executor"] = dict(options.executor) if options.executor is not None else None
        store.update_run(run_id, options=stored_model_options(stored))  # no user, password


def _with_escalate(
    prepared: tuple[CompiledPlan, RunOptions], escalate: str | None
) -> tuple[CompiledPlan, RunOptions]:
    """``--escalate`` over the run's stored mode."""
    if escalate is None:
        return prepared
    import dataclasses

    compiled, options = prepared
    return compiled, dataclasses.replace(options, escalate=escalate_mode(escalate))


def _resume_escalated(
    store: Store,
    run_id: str,
    row: Any,
    *,
    instruction: str | None,
    approve: str | None,
    escalate: str | None,
    who: str,
    as_json: bool,
    endpoint: Endpoint,
) -> NoReturn:
    """``plandag resume`` on an escalated run: the planner is brought back when the run
    has one; otherwise the run continues as it is (an instruction is refused: nobody
    could follow it). ``endpoint``: where ``--provider``, ``--model``, ``--base-url`` point
    it (or its own URL given again with its user and password)."""
    from plandag.runs.escalations import close_escalation
    from plandag.runs.options import RunOptions

    if instruction is not None and RunOptions.from_json(row.options).planner is None:
        from plandag.escalation import escalation_actions

        cases = store.escalations(run_id=run_id)
        versions = store.plan_versions(run_id)
        actions = escalation_actions(
            run_id,
            cases[-1].reason if cases else "",
            versions[-1].hash if versions else None,
            has_planner=False,
        )
        instead = (
            f"check what happened outside, then `{actions['approve']}` runs the step(s) again"
            if actions["approve"]
            else f"`{actions['resume']}` continues it as it is"
        )
        _fail(
            f"run {run_id} has no planner to follow an instruction (it was made by `plandag "
            f"exec` without --planner); {instead}, `{actions['abandon']}` closes it"
        )
    settings = common.command_settings({})
    hooks = escalation_hooks(settings)
    prepared = _with_escalate(
        _prepare(store, run_id, endpoint.row(row), "resume", endpoint.again), escalate
    )
    if approve is not None:
        import dataclasses

        compiled, options = prepared
        prepared = compiled, dataclasses.replace(options, approve=approve_mode(approve))
    prepared = prepared[0], endpoint.apply(run_id, prepared[1])
    options = prepared[1]
    if options.planner is not None:
        from plandag.cli.agent_store import resume_with_planner

        resume_with_planner(
            store,
            run_id,
            row,
            prepared,
            instruction=instruction,
            who=who,
            hooks=hooks,
            as_json=as_json,
            keep_endpoint=endpoint.keep if endpoint.given else None,
        )
    if not store.claim_run(run_id, ["escalated"], row.pid):
        _fail(f"run {run_id}: another process resumed it first; `plandag runs` shows it")
    endpoint.keep(store, run_id, row, options)
    close_escalation(store, run_id, "resumed", who=who)
    _continue(
        store,
        run_id,
        prepared,
        command="resume",
        approve=None,
        approved_unknown=False,
        as_json=as_json,
        hooks=hooks,
    )
    raise AssertionError("unreachable")  # pragma: no cover: _continue exits


def _parse_edits(values: list[str]) -> dict[int, dict[str, Any]]:
    """``--edit-step 'N={JSON object}'`` values by step id (exit 2 with the reason for a
    malformed one)."""
    edits: dict[int, dict[str, Any]] = {}
    for value in values:
        number, separator, text = value.partition("=")
        try:
            step_id = int(number.strip())
        except ValueError:
            step_id = 0
        if not separator or step_id < 1:
            _fail(
                f"--edit-step {value!r}: write STEP=JSON, like --edit-step "
                """'2={"path": "out/b.json"}'"""
            )
        try:
            edit = json.loads(text)
        except ValueError as error:
            _fail(f"--edit-step {value!r}: the part after = is not JSON ({error})")
        if not isinstance(edit, dict):
            _fail(
                f"--edit-step {value!r}: give a JSON object of argument names and values, "
                """like '2={"path": "out/b.json"}'"""
            )
        if step_id in edits:
            _fail(f"--edit-step: step {step_id} is edited twice; merge the two into one object")
        edits[step_id] = edit
    return edits


def _trace_amendment(store: Store, row: Any, who: str, feedback: str | None) -> None:
    """Append a step-by-step decision taken from the command line to the run's trace: the
    decision ``amended`` on the version decided on, the new version, its approval."""
    from plandag.runs.options import RunOptions
    from plandag.trace.redact import Redactor
    from plandag.trace.writer import TraceWriter

    versions = store.plan_versions(row.run_id)
    old, new = versions[-2], versions[-1]
    options = RunOptions.from_json(row.options)
    writer = TraceWriter(
        store.trace_path(row.run_id),
        row.run_id,
        segment=row.segment,
        redact=Redactor(personal=options.redact),
    )
    try:
        writer.approval(old.version, old.hash, "amended", who, feedback)
        writer.plan(new.version, new.plan, new.hash, "amended")
        writer.approval(new.version, new.hash, "approved", who, None)
    finally:
        writer.close()


def _trace_decision(
    store: Store, row: Any, digest: str, decision: str, who: str, feedback: str | None
) -> Any:
    """Append a decision taken from the command line to the run's trace; returns the
    (closed unless used as a context manager) writer."""
    from plandag.runs.options import RunOptions
    from plandag.trace.redact import Redactor
    from plandag.trace.writer import TraceWriter

    options = RunOptions.from_json(row.options)
    writer = TraceWriter(
        store.trace_path(row.run_id),
        row.run_id,
        segment=row.segment,
        redact=Redactor(personal=options.redact),
    )
    writer.approval(row.version, digest, decision, who, feedback)
    return writer


def _shown_status(row: Any, escalation: str | None = None) -> str:
    """The state as listed: a run ``running`` whose process is gone crashed or was killed
    (``crashed (resume it)``); an escalated run with its reason (``escalated
    (replan_caps)``)."""
    if _process_gone(row):
        return "crashed (resume it)"
    if row.status == "escalated" and escalation is not None:
        return f"escalated ({escalation})"
    expired = row.expires_at is not None and time.time() > row.expires_at
    if row.status == "awaiting_approval" and expired:
        return "awaiting_approval (expired)"
    return str(row.status)


def _shown_goal(goal: str | None) -> str:
    """A goal as listed: secrets masked always, personal data not (the trace masks it with
    --redact; the store keeps what the run needs)."""
    from plandag.trace.redact import scrub_secrets

    return str(scrub_secrets(goal or ""))


def _process_gone(row: Any) -> bool:
    """A run ``running`` that no live process holds: it crashed
    (:attr:`~plandag.store.RunRow.crashed`: its recorded process died, or the id now
    belongs to another process), or this very process is recorded (a command reading a run
    runs none: what an earlier call in this process left)."""
    return bool(row.status == "running" and (row.pid == os.getpid() or row.crashed))


def _still_stored(store: Store, run_id: str) -> bool:
    try:
        store.run(run_id)
    except InputError:
        return False
    return True
