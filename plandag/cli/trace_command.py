"""``plandag trace RUN_ID`` and ``plandag diff RUN_A RUN_B`` (docs/durable-runs.md).

``trace`` prints a run's timeline in the terminal (steps as bars over time, the critical
path marked with ``*``); ``--html FILE`` writes a self-contained page (inline SVG: the DAG
and a Gantt chart) instead; ``--json`` prints the trace as JSON. ``diff`` compares two
runs' plans and outcomes (``--json`` for the JSON form).

A run is named by its id or a unique prefix of it, looked up in the run store (``--store
PATH``, else ``PLANDAG_STORE``, else the default store); its trace is the store's
``traces/RUN_ID.jsonl``. A path to a ``.jsonl`` trace file works in place of a run id
(``--trace FILE`` for ``trace``), so a trace copied elsewhere can be read without a store.

Exit codes: 0 done; 2 unusable arguments (an unknown run, a missing or empty trace, an
unwritable ``--html`` file).

:func:`register` adds both commands to the ``plandag`` typer app.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from plandag.cli.common import fail, stderr, stdout
from plandag.cli.options import JsonOption
from plandag.errors import InputError
from plandag.trace.diff import diff_traces, render_diff
from plandag.trace.html import write_html
from plandag.trace.model import Trace
from plandag.trace.reader import load_trace
from plandag.trace.timeline import render_timeline

__all__ = ["diff_command", "register", "resolve_trace_path", "trace_command"]

StoreOption = Annotated[
    Path | None,
    typer.Option(
        "--store",
        metavar="PATH",
        help="The run store's database (default: $PLANDAG_STORE, else the user's data folder).",
    ),
]


def resolve_trace_path(run: str, store: Path | None) -> Path:
    """The trace file of ``run``.

    Args:
        run: a run id, a unique prefix of one, or the path of a ``.jsonl`` trace file
            (used as it is when it exists).
        store: the store's database file, or None for the default store.

    Returns:
        The trace file's path (it exists).

    Raises:
        InputError: no such run in the store, or the run has no trace file.
    """
    return _resolve(run, store)[0]


def _resolve(run: str, store: Path | None) -> tuple[Path, bool]:
    """:func:`resolve_trace_path` and whether the run's stored options say its model
    answers were the offline model's (False for a trace file given by path): the model
    calls of its ``llm`` and ``agent`` steps are not in the trace."""
    candidate = Path(run)
    if run.endswith(".jsonl") and candidate.is_file():
        return candidate, False
    from plandag.runs.options import ran_offline
    from plandag.store import open_store

    opened = open_store(store)
    try:
        run_id = opened.resolve_run_id(run)
        path = Path(opened.trace_path(run_id))
        offline = ran_offline(opened.run(run_id).options)
    finally:
        opened.close()
    if not path.is_file():
        raise InputError(f"run {run_id} has no trace (expected {path})")
    return path, offline


def _load(run: str | None, trace_file: Path | None, store: Path | None, flag: str) -> Trace:
    try:
        if trace_file is not None:
            return load_trace(trace_file)
        if run is None:
            fail(f"give a RUN_ID or {flag} FILE")
        path, offline = _resolve(run, store)
        trace = load_trace(path)
    except InputError as error:
        fail(str(error))
    trace.offline = trace.offline or offline
    return trace


def trace_command(
    run_id: str | None,
    *,
    store: Path | None = None,
    trace_file: Path | None = None,
    html: Path | None = None,
    as_json: bool = False,
) -> None:
    """Body of ``plandag trace`` (arguments as the options; see the module docstring).

    Raises:
        typer.Exit: code 2 for unusable arguments (the message on stderr).
    """
    if run_id is not None and trace_file is not None:
        fail("give a RUN_ID or --trace FILE, not both")
    trace = _load(run_id, trace_file, store, "--trace")
    if html is not None:
        if html.is_dir():
            fail(f"--html {html} is a folder; name the file, e.g. {html / 'report.html'}")
        try:
            write_html(trace, html)
        except OSError as error:
            fail(f"--html {html}: cannot write it ({error.strerror or error})")
        stderr.print(f"wrote {html}", markup=False, highlight=False)
        if not as_json:
            return
    if as_json:
        sys.stdout.write(json.dumps(trace.to_json_dict(), ensure_ascii=False, indent=2) + "\n")
        return
    render_timeline(trace, stdout)


def diff_command(
    run_a: str, run_b: str, *, store: Path | None = None, as_json: bool = False
) -> None:
    """Body of ``plandag diff`` (see the module docstring).

    Raises:
        typer.Exit: code 2 for unusable arguments (the message on stderr).
    """
    first = _load(run_a, None, store, "a trace")
    second = _load(run_b, None, store, "a trace")
    difference = diff_traces(first, second)
    if as_json:
        document = difference.to_json_dict()
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
        return
    render_diff(difference, stdout)


def register(app: typer.Typer) -> None:
    """Add the ``trace`` and ``diff`` commands to ``app`` (the ``plandag`` typer app).

    Args:
        app: the typer application to add the commands to.
    """

    @app.command("trace")
    def trace(
        run_id: Annotated[
            str | None,
            typer.Argument(
                metavar="RUN_ID",
                help="A run id or a unique prefix (`plandag runs` lists them), or a .jsonl "
                "trace file.",
            ),
        ] = None,
        store: StoreOption = None,
        trace_file: Annotated[
            Path | None,
            typer.Option("--trace", metavar="FILE", help="Read this trace file (no store)."),
        ] = None,
        html: Annotated[
            Path | None,
            typer.Option(
                "--html",
                metavar="FILE",
                help="Write a self-contained HTML page (the DAG and a Gantt chart) to FILE.",
            ),
        ] = None,
        as_json: JsonOption = False,
    ) -> None:
        """Show a run's timeline: steps as bars over time, the critical path marked (*)."""
        trace_command(run_id, store=store, trace_file=trace_file, html=html, as_json=as_json)

    @app.command("diff")
    def diff(
        run_a: Annotated[str, typer.Argument(metavar="RUN_A", help="The first run (or trace).")],
        run_b: Annotated[str, typer.Argument(metavar="RUN_B", help="The second run (or trace).")],
        store: StoreOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Compare two runs: steps added, removed or changed, and their outcomes."""
        diff_command(run_a, run_b, store=store, as_json=as_json)
