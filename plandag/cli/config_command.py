"""``plandag config``: the effective defaults of every brake and limit, where each came
from, and the default brakes of every job."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from plandag.brakes import JOB_BRAKES, UNLIMITED
from plandag.cli.common import command_settings, stdout
from plandag.cli.options import JsonOption
from plandag.config import shown

__all__ = ["register", "show_config"]


def show_config(as_json: JsonOption = False) -> None:
    """Print the effective defaults of every brake and limit, and where each came from,
    then the default brakes of every job.

    Sources, lowest first: plandag's defaults (the brakes from the job's row below),
    [tool.plandag] in pyproject.toml, plandag.toml, then the command's own flags. A brake
    is lifted with "none" (--max-cost none; max_cost = "none" in a file).
    """
    settings = command_settings({})
    jobs = {job: command_settings({}, job) for job in JOB_BRAKES}
    if as_json:
        document: dict[str, Any] = {
            name: {"value": shown(value), "source": source}
            for name, value, source in settings.as_rows()
        }
        document["brakes"] = {
            job: {
                "per": JOB_BRAKES[job].per,
                "max_cost": shown(values["max_cost"]),
                "max_tokens": shown(values["max_tokens"]),
                "max_seconds": shown(values["max_seconds"]),
                "stall_after": shown(values["stall_after"]),
                "stop_on_stall": values["stop_on_stall"],
                "write_boundary": JOB_BRAKES[job].boundary,
            }
            for job, values in jobs.items()
        }
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    from rich.table import Table

    from plandag.brakes import describe_cost, describe_seconds, describe_tokens

    table = Table(title="plandag configuration", title_justify="left")
    table.add_column("setting", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_column("source", overflow="fold")
    for name, value, source in settings.as_rows():
        table.add_row(name, "-" if value is None else str(shown(value)), source)
    stdout.print(table)
    brakes = Table(title="brakes by job (on by default; lift with none)", title_justify="left")
    for column in ("job", "cost", "tokens", "wall clock", "stall", "write boundary"):
        brakes.add_column(column, no_wrap=column in ("job", "cost", "tokens"))
    for job, values in jobs.items():
        row = JOB_BRAKES[job]
        stall = describe_seconds(values["stall_after"])
        if not isinstance(values["stall_after"], type(UNLIMITED)):
            stall += " → stop" if values["stop_on_stall"] else " → report"
        brakes.add_row(
            job,
            describe_cost(values["max_cost"]) + f" per {row.per}",
            describe_tokens(values["max_tokens"]),
            describe_seconds(values["max_seconds"]),
            stall,
            row.boundary,
        )
    stdout.print(brakes)
    stdout.print(
        "lift a brake: --max-cost none, --max-tokens none, --max-seconds none, --stall-after "
        'none (in a file: max_cost = "none"); --no-stop-on-stall reports a stall without '
        "stopping.",
        markup=False,
        highlight=False,
    )
    stdout.print(
        "python: run_plan(...) and Agent(...) without brake arguments get the python row; "
        "lift with UNLIMITED (from plandag import UNLIMITED).",
        markup=False,
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    """Add ``config`` to ``app`` (the ``plandag`` typer app)."""
    app.command("config")(show_config)
