"""``plandag resume``, ``approve``, ``reject`` and ``abandon``: a stored run continued, or
decided on, from any shell (docs/durable-runs.md).

* ``plandag resume RUN_ID``: continues a crashed or interrupted run (completed steps never
  run again; see :mod:`plandag.runs.segments`).
* ``plandag approve RUN_ID [--hash H]``: approves the plan version awaiting a decision and
  runs it in the same run; ``plandag reject RUN_ID --feedback TEXT``: refuses it (exit 4; a
  ``plandag run`` goes back to its planner for a revision).
* Escalated runs (handed to a person, see :mod:`plandag.escalation`): ``plandag resume
  RUN_ID --instruction TEXT`` goes on with the person's instruction (the planner is brought
  back for ``run`` and ``exec --planner`` runs); ``plandag approve RUN_ID --hash H`` runs
  again a step whose outcome was unknown; ``plandag abandon RUN_ID --reason TEXT`` ends the
  run ``abandoned``. Each decision is recorded with who (``--who``, default the login
  name), when and its text.

Exit codes as :mod:`plandag.cli.durable` says.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from plandag.approval import InvalidDecisionError, StaleDecisionError, current_user
from plandag.cli import common
from plandag.cli.common import fail
from plandag.cli.durable import (
    approve_mode,
    continue_stored,
    escalate_mode,
    escalation_hooks,
    open_cli_store,
    planned_exit_code,
    prepared_run,
    print_lines,
    rebuilt_run,
    report_planned,
    restored_run_options,
    stored_run,
    terminal_approver,
)
from plandag.cli.endpoint import Endpoint
from plandag.cli.models_options import BaseUrlAgainOption
from plandag.cli.options import ApproveOption, EscalateOption, StoreOption
from plandag.errors import InputError
from plandag.runs.listing import process_gone, still_stored
from plandag.runs.traces import trace_amendment, trace_decision

if TYPE_CHECKING:
    from plandag.compiler.compiled import CompiledPlan
    from plandag.escalation import EscalationHooks
    from plandag.planner.agent import AgentResult
    from plandag.runs.options import RunOptions
    from plandag.store import Store

__all__ = ["abandon_command", "approve_command", "register", "reject_command", "resume_command"]

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
            metavar="anthropic|openai|offline",
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
    run_id, row = stored_run(store, run)
    if instruction is not None and not instruction.strip():
        fail("--instruction is empty: say what the planner should do now")
    endpoint = Endpoint.given_for(row, provider, model, base_url)
    with contextlib.ExitStack() as segment:
        _job_segment(segment, store, run_id, row)
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
        fail(
            f"run {run_id} is {row.status}, not escalated: --instruction is for a run "
            f"handed to a person (`plandag inbox` lists them); `plandag resume {run_id}` "
            "continues this one as it is"
        )
    if row.status == "awaiting_approval":
        fail(
            f"run {run_id} awaits a decision ({row.awaiting_reason}); use "
            f"`plandag approve {run_id}` or `plandag reject {run_id} --feedback TEXT`"
        )
    if row.status not in RESUMABLE:
        fail(f"run {run_id} ended {row.status}; there is nothing to resume")
    if row.status == "running" and not process_gone(row):
        fail(
            f"run {run_id} is still running in process {row.pid}; stop it first "
            "(Ctrl-C ends it interrupted) or wait"
        )
    # Taken before anything is read: a run held by a live process is never deleted by
    # gc, so the plan read next is still there.
    if not store.claim_run(run_id, sorted(RESUMABLE), row.pid):
        if not still_stored(store, run_id):
            fail(
                f"run {run_id} was deleted from {store.path} (`plandag gc`) before it "
                "could be resumed"
            )
        fail(f"run {run_id}: another process resumed it first; `plandag runs` shows it")
    try:
        prepared = _with_escalate(
            prepared_run(store, run_id, endpoint.row(row), "resume", endpoint.again), escalate
        )
        prepared = prepared[0], endpoint.apply(run_id, prepared[1])
    except BaseException:  # not resumed after all: give the run back as it was
        store.update_run(run_id, status=row.status, pid=row.pid, pid_started=row.pid_started)
        raise
    endpoint.keep(store, run_id, row, prepared[1])
    continue_stored(
        store,
        run_id,
        prepared,
        command="resume",
        approve=approve,
        approved_unknown=False,
        as_json=as_json,
    )


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
        typer.Option("--feedback", help="Why steps were rejected (a planner, if any, gets it)."),
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
    run_id, row = stored_run(store, run)
    if row.status == "escalated":
        if reject_step or edit_step:
            fail(
                f"run {run_id} is escalated: --reject-step and --edit-step decide on a plan "
                f"awaiting approval; `plandag resume {run_id} --instruction TEXT` asks "
                "the planner for another plan"
            )
        for_escalated = prepared_run(store, run_id, row, "approve", base_url)
        decider = who or current_user()
        try:
            digest = approve_escalated(store, run_id, who=decider, expected_hash=plan_hash)
        except (StaleDecisionError, InputError) as error:
            fail(str(error))
        trace_decision(store, store.run(run_id), digest, "approved", decider, None).close()
        continue_stored(
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
        fail(
            f"run {run_id} is running in process {row.pid} (it may be asking at its "
            "terminal); decide there, or wait"
            if not process_gone(row)
            else f"run {run_id} crashed while running; `plandag resume {run_id}` goes on"
        )
    prepared = (
        prepared_run(store, run_id, row, "approve", base_url)
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
        fail(str(error))
    assert prepared is not None
    row = store.run(run_id)
    if reject_step or edits:
        trace_amendment(store, row, decider, feedback)
        prepared = rebuilt_run(store, run_id, row, base_url)  # the version the choices made
        common.stderr.print(
            f"run {run_id}: step choices made plan version {row.version} "
            f"(hash {digest}), approved by {decider}",
            markup=False,
            highlight=False,
        )
    else:
        trace_decision(store, row, digest, "approved", decider, None).close()
    continue_stored(
        store,
        run_id,
        prepared,
        command="approve",
        approve=None,
        approved_unknown=True,
        as_json=as_json,
    )


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
        fail("--feedback is empty: say why, in words the planner can act on")
    store = open_cli_store(store_path)
    run_id, before = stored_run(store, run)
    stored = RunOptions.from_json(before.options)
    if stored.planner is not None and before.command == "run":
        restored_run_options(before, run_id, base_url)  # the planner's URL, before deciding
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
        fail(str(error))
    row = store.run(run_id)
    options = RunOptions.from_json(row.options)
    if options.planner is not None and row.command == "run":
        options = restored_run_options(row, run_id, base_url)
    decider = who or current_user()
    with trace_decision(store, row, digest, "rejected", decider, feedback) as writer:
        if options.planner is not None and row.command == "run":
            from plandag.runs.planned import revise

            try:
                print_lines(revise(store, run_id, row, options, writer))
            except InputError as error:
                fail(str(error))
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
    run_id, _ = stored_run(store, run)
    decider = who or current_user()
    try:
        abandon(store, run_id, who=decider, reason=reason)
    except InputError as error:
        fail(str(error))
    common.stderr.print(
        f"run {run_id} abandoned by {decider}: {reason}", markup=False, highlight=False
    )
    if as_json:
        document = {"run_id": run_id, "status": "abandoned", "who": decider, "reason": reason}
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
    raise typer.Exit(common.EXIT_CODES["abandoned"])


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
        fail(
            f"run {run_id} has no planner to follow an instruction (it was made by `plandag "
            f"exec` without --planner); {instead}, `{actions['abandon']}` closes it"
        )
    settings = common.command_settings({})
    hooks = escalation_hooks(settings)
    prepared = _with_escalate(
        prepared_run(store, run_id, endpoint.row(row), "resume", endpoint.again), escalate
    )
    if approve is not None:
        import dataclasses

        compiled, options = prepared
        prepared = compiled, dataclasses.replace(options, approve=approve_mode(approve))
    prepared = prepared[0], endpoint.apply(run_id, prepared[1])
    options = prepared[1]
    if options.planner is not None:
        _resume_planned(
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
        fail(f"run {run_id}: another process resumed it first; `plandag runs` shows it")
    endpoint.keep(store, run_id, row, options)
    close_escalation(store, run_id, "resumed", who=who)
    continue_stored(
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


def _resume_planned(
    store: Store,
    run_id: str,
    row: Any,
    prepared: tuple[CompiledPlan, RunOptions],
    *,
    instruction: str | None,
    who: str,
    hooks: EscalationHooks | None,
    as_json: bool,
    keep_endpoint: Callable[[Store, str, Any, RunOptions], None] | None = None,
) -> NoReturn:
    """``plandag resume RUN_ID [--instruction TEXT]`` on an escalated run that has a
    planner: the planner is brought back (:class:`plandag.runs.planned.PlannerResume`)
    with the progress shown and the terminal as the approver; prints the result as
    ``plandag run`` does and exits with its code; when the model could not be reached,
    says so and exits 5 (the run stays escalated)."""
    from plandag.cli.signals import Interruptible, exit_code_for_signal
    from plandag.runs.planned import PlannerResume

    compiled, options = prepared
    progress, observers = common.progress_observers(compiled, common.command_settings({}))
    try:
        resume = PlannerResume(
            store,
            run_id,
            row,
            prepared,
            instruction=instruction,
            who=who,
            hooks=hooks,
            observers=observers,
            approver=terminal_approver(progress) if options.approve == "ask" else None,
            keep_endpoint=keep_endpoint,
        )
    except InputError as error:
        fail(str(error))
    try:
        with progress:
            outcome = Interruptible(resume.work).run()
        escalated, lines = resume.finish(outcome.result)
        print_lines(lines)
    finally:
        resume.close()
    result = outcome.result
    if resume.unreachable and result is not None:
        _tell_unreachable(run_id, dict(options.planner or {}), result, as_json)  # exits 5
    if result is None:
        code = exit_code_for_signal(outcome.signal) if outcome.signal is not None else 130
        fail("the run was interrupted before it could report", code)
    report_planned(result, as_json, offline=options.offline)
    if escalated is not None and escalated.message:
        common.stderr.print(escalated.message, markup=False, highlight=False)
    common.stderr.print(f"run {run_id} ({result.status}); store {store.path}")
    if outcome.signal is not None:
        raise typer.Exit(exit_code_for_signal(outcome.signal))
    raise typer.Exit(planned_exit_code(result))


def _tell_unreachable(
    run_id: str, planner: Mapping[str, Any], result: AgentResult, as_json: bool
) -> NoReturn:
    """Tell the person the model could not be reached and the escalation stays open;
    exit 5 (the run is escalated)."""
    assert result.error is not None
    where = planner.get("base_url") or f"the {planner.get('provider')} API"
    unreachable = result.error.type == "NotStartedError"  # nothing was sent
    what = "is unreachable" if unreachable else "failed the call"
    if as_json:
        document = {
            "run_id": run_id,
            "status": "escalated",
            "instruction_used": False,
            "error": {"type": result.error.type, "message": result.error.message},
        }
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
    common.stderr.print(
        f"error: run {run_id}: the model endpoint {where} {what} ({result.error.message}); your "
        "instruction was not used and the run stays escalated: run the same command again "
        f"when the model answers, or point the run at another endpoint with `plandag resume "
        f"{run_id} --instruction TEXT --base-url URL` (or --provider, --model)",
        markup=False,
        highlight=False,
    )
    raise typer.Exit(common.EXIT_CODES["escalated"])


def _with_escalate(
    prepared: tuple[CompiledPlan, RunOptions], escalate: str | None
) -> tuple[CompiledPlan, RunOptions]:
    """``--escalate`` over the run's stored mode."""
    if escalate is None:
        return prepared
    import dataclasses

    compiled, options = prepared
    return compiled, dataclasses.replace(options, escalate=escalate_mode(escalate))


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
            fail(
                f"--edit-step {value!r}: write STEP=JSON, like --edit-step "
                """'2={"path": "out/b.json"}'"""
            )
        try:
            edit = json.loads(text)
        except ValueError as error:
            fail(f"--edit-step {value!r}: the part after = is not JSON ({error})")
        if not isinstance(edit, dict):
            fail(
                f"--edit-step {value!r}: give a JSON object of argument names and values, "
                """like '2={"path": "out/b.json"}'"""
            )
        if step_id in edits:
            fail(f"--edit-step: step {step_id} is edited twice; merge the two into one object")
        edits[step_id] = edit
    return edits


def _job_segment(stack: contextlib.ExitStack, store: Store, run_id: str, row: Any) -> None:
    """Enter on ``stack`` what a job needs around a later segment of its run: a research
    run's corpus bound and its report written again at the end
    (:func:`plandag.jobs.research.run.research_segment`); nothing for other runs. Exits 2
    when the job's inputs are gone."""
    if row.command == "research" and row.status not in ("succeeded", "failed", "cancelled"):
        from plandag.jobs.research.run import research_segment

        try:
            stack.enter_context(research_segment(store, run_id, row, say=print_line))
        except InputError as error:
            fail(str(error))


def print_line(line: str) -> None:
    """Print ``line`` on stderr as it is (no markup)."""
    common.stderr.print(line, markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``resume``, ``approve``, ``reject`` and ``abandon`` to ``app`` (the ``plandag``
    typer app)."""
    app.command("resume")(resume_command)
    app.command("approve")(approve_command)
    app.command("reject")(reject_command)
    app.command("abandon")(abandon_command)
