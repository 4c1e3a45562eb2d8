"""``plandag gc``: delete old runs, their traces and unreferenced blobs from the run store.

The rules (which runs, which rows, which blobs) are :mod:`plandag.store.gc`'s; this module
only reads the options and prints the report.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from plandag.cli.options import StoreOption, fail

__all__ = ["gc_command", "register"]


def _size(number: int) -> str:
    value = float(number)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def gc_command(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            metavar="AGE",
            help="Delete runs last updated longer ago than this: 30d, 12h, 90m, 3600s.",
        ),
    ],
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Delete nothing; print what would go.")
    ] = False,
    vacuum: Annotated[
        bool,
        typer.Option("--vacuum", help="Then VACUUM the database so its file shrinks (slow)."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")] = False,
    store_path: StoreOption = None,
) -> None:
    """Delete old runs, their traces and blobs nothing references (never a run a live
    process holds, nor awaiting_approval or escalated runs, nor conversations, nor the runs
    that produced a plan kept in the plan library). A crashed run (its process died while
    running it) counts as ended: once deleted it can no longer be resumed."""
    from plandag.errors import InputError
    from plandag.library import keep_library_runs  # noqa: F401  (registers the keeper)
    from plandag.store import open_store
    from plandag.store.gc import collect_garbage, parse_duration

    try:
        older_than_s = parse_duration(older_than)
    except ValueError as error:
        fail(f"--older-than {error}")
    try:
        store = open_store(store_path)
    except InputError as error:
        fail(str(error))
    with store:
        report = collect_garbage(store, older_than_s=older_than_s, dry_run=dry_run, vacuum=vacuum)
    if as_json:
        sys.stdout.write(json.dumps(report.as_dict(), ensure_ascii=False, indent=2) + "\n")
        return
    verb = "would delete" if dry_run else "deleted"
    runs = len(report.run_ids)
    sys.stdout.write(
        f"{verb} {runs} run{'s' if runs != 1 else ''}, {len(report.traces)} trace file(s), "
        f"{len(report.blobs)} blob(s): {_size(report.bytes_freed)} of files\n"
    )
    crashed = set(report.crashed)
    for run_id in report.run_ids:
        sys.stdout.write(f"  {run_id}{'  (crashed)' if run_id in crashed else ''}\n")
    if crashed:
        sys.stdout.write(
            f"{len(crashed)} of them crashed (their process died while running them): "
            + (
                "once deleted they can no longer be resumed\n"
                if dry_run
                else "they can no longer be resumed\n"
            )
        )
    kept = len(report.kept_protected) + len(report.kept_by_keepers)
    if kept:
        sys.stdout.write(
            f"kept {kept} old run(s): {len(report.kept_protected)} running in a live process, "
            f"awaiting approval or escalated; {len(report.kept_by_keepers)} kept by a "
            "registered keeper\n"
        )


def register(app: typer.Typer) -> None:
    """Add ``gc`` to the ``plandag`` app."""
    app.command("gc")(gc_command)
