"""The command line's end of a run that overruns its deadline (see
:mod:`plandag.scheduler.overrun`): a step ignored cancellation (an inline tool blocking the
event loop, an async tool swallowing the cancellation), so the process records the run and
exits on its own.

:func:`deadline_guard` gives the :class:`~plandag.scheduler.overrun.DeadlineGuard` of
``exec`` and ``run``. When it fires, every run it names is written to the run store through
a new SQLite connection (the event loop may be blocked inside a tool, holding nothing):
running steps ``cancelled`` and pending ones ``skipped``, reason ``deadline``; the run
``timed_out`` when still ``running``. The transaction is committed (the store runs in WAL
mode with full sync, so the commit is on disk), one line goes to stderr, and the process
ends with exit code 3 (a deadline stop) through ``os._exit``: nothing else can run on a
blocked loop, and a normal exit would wait for it. A command given ``--json`` prints the
run's result first, as it would have (status ``timed_out``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from plandag.scheduler.overrun import DeadlineGuard, GuardedRun

if TYPE_CHECKING:
    from plandag.scheduler.result import RunResult

__all__ = ["EXIT_DEADLINE", "deadline_guard", "record_overrun"]

EXIT_DEADLINE = 3
"""The exit code of a run stopped by its deadline (``timed_out``)."""


def record_overrun(store_path: Path, runs: list[GuardedRun]) -> None:
    """Write ``runs`` as stopped by their deadline into the store at ``store_path``.

    Running steps end ``cancelled``, pending ones ``skipped`` (reason ``deadline``); a run
    still ``running`` ends ``timed_out``. Rows already in a terminal state are left as
    they are. A store that cannot be written is left alone (the exit says so).

    Raises:
        Nothing: failures are reported on stderr.
    """
    now = time.time()
    detail = "the run reached its wall-clock cap while this step ignored cancellation"
    try:
        connection = sqlite3.connect(store_path, timeout=2.0, isolation_level=None)
        try:
            connection.execute("BEGIN IMMEDIATE")
            for run in runs:
                # the runner knows which steps run (an effect-free step's start may still
                # be queued for the store, behind the blocked loop)
                for step_id in run.running_step_ids():
                    connection.execute(
                        "UPDATE step SET status = 'cancelled', reason = 'deadline', detail = ?, "
                        "ended_at = ? WHERE run_id = ? AND step_id = ? "
                        "AND status IN ('pending', 'running')",
                        (detail, now, run.run_id, step_id),
                    )
                connection.execute(
                    "UPDATE step SET status = 'cancelled', reason = 'deadline', detail = ?, "
                    "ended_at = ? WHERE run_id = ? AND status = 'running'",
                    (detail, now, run.run_id),
                )
                connection.execute(
                    "UPDATE step SET status = 'skipped', reason = 'deadline', detail = ?, "
                    "ended_at = ? WHERE run_id = ? AND status = 'pending'",
                    (
                        "the run reached its wall-clock cap before this step started",
                        now,
                        run.run_id,
                    ),
                )
                connection.execute(
                    "UPDATE run SET status = 'timed_out', updated = ?, pid = NULL, detail = ? "
                    "WHERE run_id = ? AND status = 'running'",
                    (now, "stopped at its deadline: a step ignored cancellation", run.run_id),
                )
            connection.execute("COMMIT")
        finally:
            connection.close()
    except sqlite3.Error as error:
        sys.stderr.write(f"error: the run store {store_path} could not record the stop: {error}\n")


def deadline_guard(
    store_path: Path, report: Callable[[RunResult], None] | None = None
) -> DeadlineGuard:
    """The guard of a command whose runs are recorded in ``store_path``: records an
    overrunning run (:func:`record_overrun`), reports it (``report``, given each run's
    result as the deadline leaves it: the command's ``--json`` document) and exits with
    code 3."""

    def on_overrun(runs: list[GuardedRun]) -> None:
        record_overrun(store_path, runs)
        steps = sorted({step for run in runs for step in run.running_step_ids()})
        where = f" (step {', '.join(map(str, steps))} ignored cancellation)" if steps else ""
        ids = ", ".join(run.run_id for run in runs)
        sys.stderr.write(
            f"timed_out: run {ids} passed its wall-clock cap{where}; it is recorded "
            "timed_out, its running steps cancelled; exiting\n"
        )
        if report is not None:
            for run in runs:
                try:
                    report(run.deadline_result())
                except Exception as error:  # the exit must come whatever the report does
                    sys.stderr.write(
                        f"error: the run {run.run_id} could not be reported: {error}\n"
                    )
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(EXIT_DEADLINE)

    return DeadlineGuard(on_overrun)
