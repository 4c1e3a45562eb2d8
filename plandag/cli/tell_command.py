"""``plandag tell RUN_ID "TEXT"``: new input from a person for a running ``plandag run``
(ARCHITECTURE.md, "Replanning"; :mod:`plandag.planner.triggers`).

The instruction goes **through the run store**: ``tell`` writes it in the store's
``instruction`` table (committed at once), and the process running the run reads that table
every 0.5 s, so the run takes it within a second. The run then drops the steps it has not
started (``skipped``, reason ``replanned``), keeps every completed step and its result, lets
running steps finish, and replans the rest with the text, verbatim. With ``--new-goal`` the
text replaces the run's goal and the planner plans again from it (a total replan).

``tell`` waits up to :data:`WAIT_S` seconds for the run to take the instruction and says
whether it did. A run that is not running (finished, escalated, awaiting a decision,
crashed) is an error (exit 2) saying what to do instead.

:func:`register` adds the command to the ``plandag`` typer app.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer

__all__ = ["WAIT_S", "register"]

WAIT_S = 2.0
"""Seconds ``tell`` waits for the run to take the instruction (it looks every 0.5 s)."""

_POLL_S = 0.05

_INSTEAD = {
    "escalated": "`plandag resume {run} --instruction TEXT` goes on with your instruction",
    "awaiting_approval": "`plandag reject {run} --feedback TEXT` sends its plan back to the "
    "planner with your text",
    "interrupted": "`plandag resume {run}` continues it",
    "timed_out": "`plandag resume {run}` continues it",
    "budget_exceeded": "`plandag resume {run}` continues it",
}


def fail(message: str) -> NoReturn:
    from rich.markup import escape

    from plandag.cli.common import EXIT_USAGE, stderr

    stderr.print(f"[red]error:[/] {escape(message)}", markup=True, highlight=False)
    raise typer.Exit(EXIT_USAGE)


def register(app: typer.Typer) -> None:
    """Add the ``tell`` command to ``app`` (the ``plandag`` typer app).

    Args:
        app: the typer application to add the command to.
    """

    @app.command("tell")
    def tell_command(
        run: Annotated[str, typer.Argument(metavar="RUN_ID", help="The run (or an id prefix).")],
        text: Annotated[str, typer.Argument(metavar="TEXT", help="What the run should do.")],
        new_goal: Annotated[
            bool,
            typer.Option(
                "--new-goal",
                help="TEXT replaces the run's goal: the planner plans again from it (the "
                "completed steps are kept).",
            ),
        ] = False,
        store_path: Annotated[
            Path | None,
            typer.Option(
                "--store",
                metavar="PATH",
                help="The run store (SQLite); default $PLANDAG_STORE, else the user's data folder.",
            ),
        ] = None,
        who: Annotated[str | None, typer.Option("--who", help="Your name.")] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
    ) -> None:
        """Give a running `plandag run` new input: the steps it has not started are
        replanned with TEXT (verbatim); completed steps are kept, running steps finish.

        The instruction goes through the run store; the run looks for instructions every
        0.5 s. A run that is not running is an error (exit 2). --json prints
        ``{"run_id", "instruction", "new_goal", "taken"}``: the instruction's number in
        the store, and whether the run took it within the wait.
        """
        from plandag.approval.gate import current_user
        from plandag.cli.common import stdout
        from plandag.errors import InputError
        from plandag.store import open_store

        if not text.strip():
            fail("TEXT is empty: say what the run should do")
        try:
            store = open_store(store_path)
        except InputError as error:
            fail(str(error))
        try:
            try:
                run_id = store.resolve_run_id(run)
                row = store.run(run_id)
            except InputError as error:
                fail(str(error))
            if row.status != "running":
                instead = _INSTEAD.get(
                    row.status, "it has ended: start a new `plandag run` with your text in the task"
                )
                fail(
                    f"run {run_id} is {row.status}, not running: an instruction reaches only "
                    "a running run" + (f"; {instead.format(run=run_id)}" if instead else "")
                )
            if row.command != "run":
                elsewhere = (
                    "`tell` reaches runs started by `plandag run` (to change this one, stop "
                    "it with Ctrl-C and run the changed plan)"
                )
                if row.command == "exec" and row.options.get("planner"):
                    fail(
                        f"run {run_id} is a `plandag exec --planner` run: it runs a stored "
                        "plan, and its planner only repairs steps that fail, taking no "
                        f"instructions; {elsewhere}"
                    )
                fail(
                    f"run {run_id} is a `plandag {row.command}` run: it has no planner to "
                    f"take an instruction; {elsewhere}"
                )
            if row.crashed:
                fail(
                    f"run {run_id} is recorded running, but its process {row.pid} is gone "
                    f"(it crashed); `plandag resume {run_id}` continues it"
                )
            number = store.add_instruction(
                run_id, text, who=who or current_user(), new_goal=new_goal
            )
            told = time.monotonic()
            taken = None
            while time.monotonic() - told < WAIT_S:
                item = next(row for row in store.instructions(run_id) if row.id == number)
                if item.consumed_at is not None:
                    taken = item
                    break
                time.sleep(_POLL_S)
        finally:
            store.close()
        what = "new goal" if new_goal else "instruction"
        if as_json:
            document = {
                "run_id": run_id,
                "instruction": number,
                "new_goal": new_goal,
                "taken": taken is not None,
            }
            sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
        elif taken is not None:
            stdout.print(
                f"run {run_id} took the {what} (instruction {number}); the steps it had not "
                "started are replanned with it",
                markup=False,
                highlight=False,
            )
        else:
            stdout.print(
                f"the {what} is recorded (instruction {number}); run {run_id} has not taken "
                f"it within {WAIT_S:g} s (it takes instructions between its model calls)",
                markup=False,
                highlight=False,
            )
