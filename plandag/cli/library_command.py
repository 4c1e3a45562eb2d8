"""``plandag library list | show | rm | export | approve`` and ``plandag stats``: the plan
library and the figures per task type (docs/library.md, docs/operations.md).

The rules (what is admitted, what waits for a person) are :mod:`plandag.library`'s; this
module reads the options and prints. Importing it imports typer and nothing of plandag's
beyond the shared options.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from plandag.cli.options import StoreOption, fail

if TYPE_CHECKING:
    from plandag.library import PlanLibrary

__all__ = ["library_app", "register", "stats_command"]

library_app = typer.Typer(
    help="Plans that worked, kept by task type and reused with no model call.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

TaskTypeArgument = Annotated[str, typer.Argument(metavar="TASK_TYPE", help="The task type.")]
VersionOption = Annotated[
    int | None,
    typer.Option("--version", metavar="N", min=1, help="One version (default: the latest)."),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]


def _store_path(store_path: Path | None) -> Path:
    from plandag.store import default_store_path

    return store_path if store_path is not None else default_store_path()


def _no_store(store_path: Path | None) -> str:
    """Why a command that only reads found nothing: the store does not exist yet."""
    return (
        f"no run store at {_store_path(store_path)} yet: nothing is recorded there "
        "(`plandag run` creates it; --store PATH or PLANDAG_STORE picks another)"
    )


def _library(store_path: Path | None, *, create: bool = False) -> PlanLibrary | None:
    """The plan library of the run store; None when the store does not exist and
    ``create`` is False (a command that only reads does not create one)."""
    from plandag.errors import InputError
    from plandag.library import PlanLibrary
    from plandag.store import open_store

    if not create and not _store_path(store_path).exists():
        return None
    try:
        return PlanLibrary(open_store(store_path))
    except InputError as error:
        fail(str(error))


def _existing_library(store_path: Path | None, task_type: str) -> PlanLibrary:
    """The plan library, or exit 2 when the store does not exist (``task_type`` unknown)."""
    library = _library(store_path)
    if library is None:
        fail(f"task type {task_type!r} is not in the plan library: {_no_store(store_path)}")
    return library


def _write_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")


def _rate(successes: int, uses: int) -> str:
    return f"{successes}/{uses} ({100 * successes / uses:.0f}%)" if uses else "-"


@library_app.command("list")
def list_command(as_json: JsonFlag = False, store_path: StoreOption = None) -> None:
    """List the task types in the library: latest admitted version, versions kept and
    pending, params, tools, uses and success rate."""
    library = _library(store_path)
    summaries = []
    if library is not None:
        try:
            summaries = library.task_types()
        finally:
            library.store.close()
    if library is None:
        sys.stderr.write(_no_store(store_path) + "\n")
    if as_json:
        _write_json([item.as_dict() for item in summaries])
        return
    if library is None:
        return
    if not summaries:
        sys.stderr.write(
            "the plan library is empty: `plandag run TASK` saves a plan once its run "
            "succeeds (under --task-type NAME, or a name derived from the plan)\n"
        )
        return
    for item in summaries:
        latest = f"v{item.latest}" if item.latest is not None else "none admitted"
        params = ", ".join(
            f"{name} ({spec.get('type', 'string')})" for name, spec in item.params.items()
        )
        pending = f", {item.pending} pending" if item.pending else ""
        sys.stdout.write(
            f"{item.task_type}  {latest}  {item.versions} version(s){pending}  "
            f"uses {_rate(item.successes, item.uses)}\n"
            f"  params: {params or 'none'}\n  tools: {', '.join(item.tools) or 'none'}\n"
        )


@library_app.command("show")
def show_command(
    task_type: TaskTypeArgument,
    version: VersionOption = None,
    as_json: JsonFlag = False,
    store_path: StoreOption = None,
) -> None:
    """Show a task type's versions (or one), each with its status, who approved it, its
    uses and success rate, and its plan."""
    from plandag.errors import InputError

    library = _existing_library(store_path, task_type)
    try:
        found = (
            [library.version(task_type, version)]
            if version is not None
            else library.versions(task_type)
        )
        if not found:
            library.version(task_type)  # says the type is unknown
    except InputError as error:
        fail(str(error))
    finally:
        library.store.close()
    if as_json:
        _write_json([item.as_dict() for item in found])
        return
    for item in found:
        status = item.status if item.status == "pending" else f"admitted by {item.approved_by}"
        sys.stdout.write(
            f"{item.task_type} version {item.version}: {status}; uses "
            f"{_rate(item.successes, item.uses)}; from run {item.source_run or '-'}\n"
        )
        if item.reason:
            sys.stdout.write(f"  pending: {item.reason}\n")
        sys.stdout.write(f"  plan hash {item.plan_hash}\n")
        plan = json.dumps(item.plan.model_dump(mode="json", exclude_none=True), indent=2)
        sys.stdout.write("".join(f"  {line}\n" for line in plan.splitlines()))


@library_app.command("rm")
def rm_command(
    task_type: TaskTypeArgument,
    version: VersionOption = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Remove it even while a run awaiting approval, escalated or interrupted "
            "reuses it (that run then saves nothing when finished).",
        ),
    ] = False,
    store_path: StoreOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Remove a task type (every version) or one of its versions; its runs' figures stay.
    A version an unfinished run reuses is kept unless --force. --json prints
    ``{"task_type", "version", "removed"}`` (version None: every version; removed: how
    many)."""
    from plandag.errors import InputError

    library = _existing_library(store_path, task_type)
    try:
        removed = library.remove(task_type, version, force=force)
    except InputError as error:
        fail(str(error))
    finally:
        library.store.close()
    if as_json:
        _write_json({"task_type": task_type, "version": version, "removed": removed})
        return
    what = f"version {version} of {task_type}" if version is not None else task_type
    sys.stderr.write(f"removed {what} ({removed} version(s))\n")


@library_app.command("export")
def export_command(
    task_type: TaskTypeArgument,
    version: VersionOption = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", metavar="FILE", help="Write here (default stdout)."),
    ] = None,
    write_boundary: Annotated[
        list[str] | None,
        typer.Option(
            "--write-boundary",
            metavar="SPEC",
            help="Where --output may write: a folder or a path glob; repeatable. Default: "
            "the write_boundary setting, else the working directory.",
        ),
    ] = None,
    store_path: StoreOption = None,
) -> None:
    """Print a task type's plan (the latest admitted version, or --version N) in the plan
    format, for `plandag exec` or another store. --output writes a file inside the write
    boundary (the working folder unless --write-boundary or the write_boundary setting)."""
    from plandag.errors import InputError

    target = _export_target(output, write_boundary) if output is not None else None
    library = _existing_library(store_path, task_type)
    try:
        item = library.version(task_type, version) if version is not None else None
        if item is None:
            item = library.latest(task_type)
            if item is None:
                library.version(task_type)  # an unknown type says so
                fail(
                    f"task type {task_type!r} has no admitted version; `plandag library show "
                    f"{task_type}` lists its versions, --version N exports one"
                )
    except InputError as error:
        fail(str(error))
    finally:
        library.store.close()
    text = json.dumps(item.plan.model_dump(mode="json", exclude_none=True), indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
        return
    assert target is not None
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as error:
        fail(
            f"--output {output}: cannot write it ({error.strerror or error}); name a file "
            "in a folder that exists"
        )
    sys.stderr.write(f"wrote {task_type} version {item.version} to {output}\n")


def _export_target(output: Path, write_boundary: list[str] | None) -> Path:
    """``--output`` checked against the write boundary (``--write-boundary``, else the
    ``write_boundary`` setting, else the working directory): exit 2 outside it."""
    from plandag.cli.common import command_settings, write_boundary_for
    from plandag.errors import BoundaryError

    settings = command_settings({"write_boundary": write_boundary})
    boundary = write_boundary_for(settings["write_boundary"], Path.cwd())
    try:
        checked = boundary.check(output)
    except BoundaryError as error:
        fail(f"--output: {error}")
    if not isinstance(checked, Path):
        fail(f"--output {output}: give a file path, not a URL")
    if checked.is_dir():
        fail(f"--output {output} is a folder: name a file in it (e.g. {output}/plan.json)")
    return checked


@library_app.command("approve")
def approve_command(
    task_type: TaskTypeArgument,
    version: VersionOption = None,
    who: Annotated[str | None, typer.Option("--who", help="Your name.")] = None,
    store_path: StoreOption = None,
    as_json: JsonFlag = False,
) -> None:
    """Admit a version waiting for a person (default: the latest pending one): runs of
    the task type reuse it from now on. --json prints the version admitted, as an item of
    `plandag library show --json`."""
    from plandag.approval.gate import current_user
    from plandag.errors import InputError

    library = _existing_library(store_path, task_type)
    try:
        item = library.approve(task_type, version, who=who or current_user())
    except InputError as error:
        fail(str(error))
    finally:
        library.store.close()
    if as_json:
        _write_json(item.as_dict())
        return
    sys.stderr.write(
        f"approved {task_type} version {item.version} (by {item.approved_by}); runs of "
        f"{task_type} reuse it\n"
    )


def stats_command(as_json: JsonFlag = False, store_path: StoreOption = None) -> None:
    """Figures per task type: runs, plans run with no replan, replans per run,
    escalations, spend and out-of-registry alerts."""
    from plandag.library import task_type_stats

    library = _library(store_path)
    figures = []
    if library is not None:
        try:
            figures = task_type_stats(library)
        finally:
            library.store.close()
    if library is None:
        sys.stderr.write(_no_store(store_path) + "\n")
    if as_json:
        _write_json([item.as_dict() for item in figures])
        return
    if library is None:
        return
    if not figures:
        sys.stderr.write("no run recorded yet (`plandag run` records each run)\n")
        return
    headers = (
        "task type",
        "runs",
        "no replan",
        "replans/run",
        "escalations",
        "spend $",
        "out-of-registry",
    )
    rows = [
        (
            item.task_type or "(none)",
            str(item.runs),
            str(item.no_replan),
            f"{item.replans_per_run:.2f}",
            str(item.escalations),
            f"{item.spend_usd:.4f}",
            str(item.out_of_registry),
        )
        for item in figures
    ]
    widths = [max(len(row[index]) for row in (headers, *rows)) for index in range(len(headers))]
    for row in (headers, *rows):
        cells = [
            cell.ljust(width) if index == 0 else cell.rjust(width)
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        sys.stdout.write("  ".join(cells).rstrip() + "\n")


def register(app: typer.Typer) -> None:
    """Add ``library`` (its subcommands) and ``stats`` to the ``plandag`` app."""
    app.add_typer(library_app, name="library")
    app.command("stats")(stats_command)
