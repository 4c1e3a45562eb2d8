"""``plandag runs`` and ``plandag inbox``: the runs in the store, newest first, and the runs
waiting for a person (escalated) or for a resume (crashed), oldest first, with the commands
that close each one (:mod:`plandag.runs.listing`)."""

from __future__ import annotations

import datetime
import json
import sys
from typing import Annotated

import typer
from rich.text import Text

from plandag.cli import common
from plandag.cli.durable import open_cli_store
from plandag.cli.models_options import OFFLINE_SUMMARY
from plandag.cli.options import StoreOption
from plandag.runs.listing import inbox_items, run_document, shown_goal, shown_status
from plandag.runs.options import ran_offline

__all__ = ["inbox_command", "register", "runs_command"]


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
        document = [run_document(row, reasons.get(row.run_id)) for row in rows]
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
            Text(shown_status(row, reasons.get(row.run_id))),
            Text(row.command + (" (offline)" if ran_offline(row.options) else "")),
            Text(_when(row.created)),
            Text(shown_goal(row.goal)[:60]),
        )
    common.stdout.print(table)
    if not rows:
        common.stderr.print("no runs yet")
    elif len(rows) == limit:
        common.stderr.print(f"the {limit} newest runs; --limit N shows more")


def inbox_command(
    store_path: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
) -> None:
    """List the escalated runs waiting for a person, and the crashed runs (their
    process died while running them), oldest first: why, since when, the goal, the
    spend, and the commands that close each one (resume, with an instruction for an
    escalated run; approve a step whose outcome was unknown; abandon)."""
    store = open_cli_store(store_path)
    items = inbox_items(store)
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
        if item.get("offline"):
            out.print(f"  {OFFLINE_SUMMARY}", markup=False, highlight=False)
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


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.datetime.fromtimestamp(seconds).strftime("%Y-%m-%d %H:%M:%S")


def register(app: typer.Typer) -> None:
    """Add ``runs`` and ``inbox`` to ``app`` (the ``plandag`` typer app)."""
    app.command("runs")(runs_command)
    app.command("inbox")(inbox_command)
