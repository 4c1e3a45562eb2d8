"""Durable runs on the command line (docs/durable-runs.md): the run store a command opens, a
run's options from the command's settings, its
approver (the terminal) and escalation hooks, a stored run read back or continued in this
process, and how a durable or planned run's outcome is printed (``--json`` included) and
turned into the exit code. The runs themselves are the runs service's
(:mod:`plandag.runs`).

Exit codes as ARCHITECTURE.md: 0 succeeded; 1 failed, gave_up or abandoned; 2 unusable
arguments (an unknown run, a stale ``--hash``, an expired request, a decision on a run that
is not escalated); 3 timed_out or budget_exceeded; 4 awaiting_approval or rejected; 5
escalated; 130/143 interrupted.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from plandag.approval import (
    ApprovalMode,
    Approver,
    InvalidDecisionError,
    StaleDecisionError,
    TerminalApprover,
)
from plandag.cli import common
from plandag.cli.common import fail
from plandag.cli.display import run_table
from plandag.cli.models_options import OFFLINE_SUMMARY
from plandag.errors import InputError
from plandag.runs.escalations import with_case_stored
from plandag.runs.traces import trace_factory
from plandag.scheduler.result import ESCALATION_MODES, EscalationMode, RunResult, to_jsonable
from plandag.trace.redact import scrub_secrets

if TYPE_CHECKING:
    from plandag.compiler.compiled import CompiledPlan
    from plandag.escalation import EscalationHooks
    from plandag.library import LibraryOutcome
    from plandag.planner.agent import AgentResult
    from plandag.runs.options import DurableOutcome, RunOptions
    from plandag.store import Store
    from plandag.tools.registry import Registry

__all__ = [
    "approve_mode",
    "continue_stored",
    "durable_exec",
    "escalate_mode",
    "escalation_hooks",
    "json_at_deadline",
    "library_lines",
    "library_lines_after",
    "open_cli_store",
    "planned_at_deadline",
    "planned_exit_code",
    "prepared_run",
    "print_lines",
    "print_stored_brakes",
    "quiet_report",
    "rebuilt_run",
    "report",
    "report_planned",
    "restored_run_options",
    "result_document",
    "run_options",
    "stored_run",
    "terminal_approver",
]


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
    from plandag.runs.stored import tools_record

    tool_files, tools_sha256 = tools_record(tools or [])
    return RunOptions(
        tools=tool_files,
        tools_sha256=tools_sha256,
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
        fail(str(error))


def stored_run(store: Store, text: str) -> tuple[str, Any]:
    """The run ``text`` names (an id or a unique prefix) and its row; exits 2 when there is
    none."""
    try:
        run_id = store.resolve_run_id(text)
        return run_id, store.run(run_id)
    except InputError as error:
        fail(str(error))


def approve_mode(value: str | None) -> ApprovalMode:
    """``--approve`` checked (default ``ask``)."""
    if value is None:
        return "ask"
    if value not in ("ask", "auto", "never"):
        fail(f"--approve {value!r}: choose ask, auto or never")
    return value  # type: ignore[return-value]


def escalate_mode(value: str | None) -> EscalationMode:
    """``--escalate`` / setting ``escalate`` checked (default ``person``)."""
    if value is None:
        return "person"
    if value not in ESCALATION_MODES:
        fail(f"--escalate {value!r}: choose {' or '.join(ESCALATION_MODES)}")
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


def escalation_hooks(settings: Any) -> EscalationHooks:
    """The escalation hooks of the effective settings (``escalation_command``,
    ``escalation_url`` with ``http_allow``, ``escalation_timeout``); exit 2 when the
    command line cannot be split."""
    from plandag.escalation import EscalationHooks

    try:
        return EscalationHooks.from_settings(settings)
    except ValueError as error:
        fail(f"{error}; fix it in plandag.toml or [tool.plandag]")


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
    outcome = with_case_stored(
        store, outcome, lambda: escalation_hooks(common.command_settings({}))
    )
    result = outcome.result
    offline = _stored_offline(store, outcome.run_id)
    if as_json:
        document = result_document(result, outcome.status, outcome.run_id, store.path)
        if offline:
            document["offline"] = True
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
        common.stderr.print(
            f"run {outcome.run_id} ({outcome.status}); store {store.path}"
            + (f"; {OFFLINE_SUMMARY}" if offline else ""),
            markup=False,
            highlight=False,
        )
    if outcome.store_error is not None:
        common.stderr.print(f"[red]error:[/] {escape(outcome.store_error)}")
        raise typer.Exit(1)
    raise typer.Exit(common.EXIT_CODES.get(outcome.status, 1))


def _stored_offline(store: Store, run_id: str) -> bool:
    """Whether stored run ``run_id`` ran with the offline model (its options say so;
    False when the run is not in the store)."""
    from plandag.runs.options import ran_offline

    try:
        return ran_offline(store.run(run_id).options)
    except InputError:
        return False


def quiet_report(outcome: DurableOutcome, *, as_json: bool, store: Store) -> None:
    """:func:`report` without its exit (a run stopped by a signal exits with the
    signal's code)."""
    with contextlib.suppress(typer.Exit):
        report(outcome, as_json=as_json, store=store)


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
        fail(str(error))
    done = outcome.result
    if done is None:
        fail("the run was interrupted before it could report", 130)
    try:
        if outcome.signal is not None:
            quiet_report(done, as_json=as_json, store=store)
            raise typer.Exit(exit_code_for_signal(outcome.signal))
        report(done, as_json=as_json, store=store)
    finally:
        store.close()


def library_lines_after(
    store: Store, run_id: str, compiled: CompiledPlan, options: RunOptions, **finished: Any
) -> list[str]:
    """What the plan library did with a run finished in this segment
    (:func:`plandag.runs.library.finish_library`, ``finished`` its keyword arguments);
    exits 2 when the run's tools files cannot be loaded."""
    from plandag.runs.library import finish_library

    try:
        return finish_library(store, run_id, compiled, options, **finished)
    except InputError as error:
        fail(str(error))


def print_lines(lines: Iterable[str]) -> None:
    """Print ``lines`` on stderr as they are (no markup)."""
    for line in lines:
        common.stderr.print(line, markup=False, highlight=False)


def prepared_run(
    store: Store, run_id: str, row: Any, command: str, base_url: str | None = None
) -> tuple[CompiledPlan, RunOptions]:
    """:func:`plandag.runs.stored.prepare`, exiting 2 with the reason when the run cannot
    be continued here (nothing is recorded)."""
    from plandag.runs.stored import prepare

    try:
        return prepare(store, run_id, row, command, base_url)
    except InputError as error:
        fail(str(error))


def rebuilt_run(
    store: Store,
    run_id: str,
    row: Any,
    base_url: str | None = None,
    *,
    options: RunOptions | None = None,
) -> tuple[CompiledPlan, RunOptions]:
    """:func:`plandag.runs.stored.rebuild`, exiting 2 with the reason."""
    from plandag.runs.stored import rebuild

    try:
        return rebuild(store, run_id, row, base_url, options=options)
    except InputError as error:
        fail(str(error))


def restored_run_options(row: Any, run_id: str, base_url: str | None = None) -> RunOptions:
    """:func:`plandag.runs.stored.restored_options`, exiting 2 saying what to give."""
    from plandag.runs.stored import restored_options

    try:
        return restored_options(row, run_id, base_url)
    except InputError as error:
        fail(str(error))


def continue_stored(
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
    """Run stored run ``run_id`` again in this process (``resume``, ``approve``:
    :func:`plandag.runs.segments.continue_run`) with its progress shown, its stored brakes
    printed, the plan library brought up to date, and its outcome printed; exits with its
    code (never returns normally)."""
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
        fail(str(error))
    done = outcome.result
    if done is None:
        fail("the run was interrupted before it could report", 130)
    print_lines(library_lines_after(store, run_id, compiled, options))
    if outcome.signal is not None:
        quiet_report(done, as_json=as_json, store=store)
        raise typer.Exit(exit_code_for_signal(outcome.signal))
    report(done, as_json=as_json, store=store)


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


def planned_exit_code(result: AgentResult) -> int:
    """The exit code of ``plandag run`` for ``result``: as ``exec`` for its status, and 2
    when the plan never compiled."""
    if result.plan_did_not_compile:
        return common.EXIT_USAGE
    return common.EXIT_CODES.get(result.status, 1)


def report_planned(result: AgentResult, as_json: bool, *, offline: bool = False) -> None:
    """Print what a planned run came to (``plandag run``, a resumed planned run): its
    ``--json`` document, or its diagnostics, table, error, spend, library lines and answer;
    a run with the offline model (``offline``: its stored options say so, or every model
    call of the run was the offline model's) says so (``"offline": true``, the summary
    line)."""
    from plandag.models.offline import OFFLINE_MODEL
    from plandag.planner.prompt import format_diagnostics

    calls = len(result.llm_calls)
    offline = offline or (
        calls > 0 and all(record.model == OFFLINE_MODEL for record in result.llm_calls)
    )
    if as_json:
        document = scrub_secrets(result.to_json_dict())  # values under secret-named keys too
        if offline:
            document["offline"] = True
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
        return
    if result.diagnostics and (result.plan_did_not_compile or result.gave_up):
        for line in format_diagnostics(result.diagnostics).splitlines():
            common.stderr.print(line, markup=False)
    if result.run.steps:
        common.stdout.print(
            run_table(result.run, console_width=common.stdout.width, status=result.status)
        )
        common.print_progress(result.run)
    if result.error is not None:
        common.stderr.print(f"error: {result.error.type}: {result.error.message}", markup=False)
    if result.status == "escalated":
        common.stderr.print(
            f"escalated ({result.run.escalation}) after {len(result.replans)} replan(s): "
            f"{result.run.escalation_detail}; no answer was made up",
            markup=False,
        )
    elif result.gave_up is not None:
        common.stderr.print(
            f"gave up ({result.gave_up}) after {len(result.replans)} replan(s); no answer "
            "was made up",
            markup=False,
        )
    cost = sum(record.cost_usd for record in result.llm_calls)
    routing = ""
    if result.routing_calls:
        routing_cost = sum(record.cost_usd for record in result.routing_calls)
        routing = f" (planner), {len(result.routing_calls)} routing call(s) ${routing_cost:.4f}"
    common.stderr.print(
        f"{result.status}: {calls} model call(s), {len(result.replans)} replan(s), "
        f"${cost:.4f} on models{routing}" + (f"; {OFFLINE_SUMMARY}" if offline else ""),
        markup=False,
    )
    from plandag.library import LibraryOutcome

    if isinstance(result.library, LibraryOutcome):  # what plandag.library.run_task reports
        for line in library_lines(result.library):
            common.stderr.print(line, markup=False, highlight=False)
    if result.answer is not None:
        if isinstance(result.answer, str):
            common.stdout.print(result.answer, markup=False, highlight=False)
        else:
            shown = scrub_secrets(to_jsonable(result.answer))
            common.stdout.print_json(json.dumps(shown, ensure_ascii=False))


def library_lines(outcome: LibraryOutcome) -> list[str]:
    """What the plan library did, in words (on standard error after the run)."""
    lines = []
    if outcome.routing_error is not None:
        lines.append(f"library: the routing answer was not used ({outcome.routing_error})")
    if outcome.how == "library":
        lines.append(
            f"library: reused {outcome.task_type} version {outcome.version} (no model call)"
        )
    elif outcome.how == "routed":
        lines.append(
            f"library: routed to {outcome.task_type} version {outcome.version} (one routing call)"
        )
    saved = outcome.saved
    if saved is not None:
        if saved.status == "admitted":
            lines.append(f"library: saved {saved.task_type} version {saved.version}")
        else:
            lines.append(
                f"library: saved {saved.task_type} version {saved.version}, pending: "
                f"{saved.reason}; `plandag library approve {saved.task_type} --version "
                f"{saved.version}` lets runs reuse it"
            )
    elif outcome.not_saved is not None and outcome.task_type is not None:
        lines.append(f"library: nothing saved for {outcome.task_type}: {outcome.not_saved}")
    if outcome.derived and outcome.task_type is not None:
        lines.append(
            f"library: task type {outcome.task_type} was named from the plan (no --task-type "
            "and nothing in the library to route to); later runs of this kind are routed to "
            "it, `--task-type NAME` names a task type yourself"
        )
    return lines
