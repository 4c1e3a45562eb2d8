"""The ``plandag`` command line (typer).

Exit codes (ARCHITECTURE.md, "States and exit codes"): ``exec`` gives 0 succeeded; 1 failed or
gave_up; 2 unusable arguments or a plan that does not compile; 3 timed_out or
budget_exceeded; 4 awaiting_approval or rejected; 130 SIGINT; 143 SIGTERM. ``extract`` gives 0
when every input got a record (whatever the records say), 2 for unusable arguments, 130/143
when interrupted.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import anyio
import typer
from rich.console import Console

from plandag.cli.display import StepProgress, diagnostic_lines, run_table
from plandag.compiler import compile_plan
from plandag.dag.graph import critical_path, mermaid
from plandag.dag.plan import Plan
from plandag.errors import InputError, PlanError, ToolLoadError
from plandag.scheduler import run_plan
from plandag.scheduler.result import RunStatus
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry, default_registry

__all__ = ["EXIT_CODES", "app", "main"]

EXIT_CODES: dict[RunStatus, int] = {
    "succeeded": 0,
    "failed": 1,
    "gave_up": 1,
    "timed_out": 3,
    "budget_exceeded": 3,
    "awaiting_approval": 4,
    "rejected": 4,
    "interrupted": 130,
}
EXIT_USAGE = 2

app = typer.Typer(
    name="plandag",
    help="Compile an LLM's plan into a validated DAG and run it: parallel, checked, bounded.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
extract_app = typer.Typer(help="Batch extraction jobs built on stored plans.", no_args_is_help=True)
app.add_typer(extract_app, name="extract")

stdout = Console(soft_wrap=True, highlight=False)
stderr = Console(stderr=True, soft_wrap=True, highlight=False)

ToolsOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--tools", help="A Python file whose @tool functions are registered (repeatable)."
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]


def _fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    stderr.print(f"[red]error:[/] {message}", markup=True, highlight=False)
    raise typer.Exit(code)


def _registry(tools: list[Path] | None) -> Registry:
    registry = default_registry()
    for file in tools or []:
        try:
            registry.load_file(file)
        except ToolLoadError as error:
            _fail(str(error))
    return registry


def _read_plan(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        _fail(f"plan file {path} does not exist")
    except (OSError, UnicodeDecodeError) as error:
        _fail(f"cannot read plan file {path}: {error}")


def _parse_params(pairs: list[str] | None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            _fail(f"--param {pair!r} must look like NAME=VALUE")
        params[name.strip()] = value
    return params


def _print_diagnostics(source: str, error_or_list: PlanError | list[Any], as_json: bool) -> None:
    diagnostics = (
        error_or_list.diagnostics if isinstance(error_or_list, PlanError) else error_or_list
    )
    if as_json:
        stdout.print_json(json.dumps([d.as_dict() for d in diagnostics], ensure_ascii=False))
        return
    for line in diagnostic_lines(source, diagnostics):
        stderr.print(line, markup=False, highlight=False)


@app.command()
def schema(
    which: Annotated[
        str, typer.Argument(help="plan (the plan format) or nfe (the NF-e extraction record).")
    ] = "plan",
) -> None:
    """Print a JSON Schema: the plan format or the NF-e record."""
    if which == "plan":
        document = Plan.model_json_schema()
    elif which == "nfe":
        from plandag.extract.nfe.record import nfe_record_json_schema

        document = nfe_record_json_schema()
    else:
        _fail(f"unknown schema {which!r}; choose plan or nfe")
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


@app.command()
def check(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN.json", help="The plan to compile.")],
    tools: ToolsOption = None,
    as_json: JsonOption = False,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Reject tools with effects.")
    ] = False,
) -> None:
    """Compile a plan without running it; print every diagnostic like a compiler."""
    registry = _registry(tools)
    text = _read_plan(plan_file)
    try:
        compiled = compile_plan(
            text, registry, read_only=read_only, write_boundary=WriteBoundary([Path.cwd()])
        )
    except PlanError as error:
        _print_diagnostics(str(plan_file), error, as_json)
        if not as_json:
            count = len(error.codes)
            stderr.print(f"{plan_file}: {count} error(s); the plan does not compile")
        raise typer.Exit(EXIT_USAGE) from None
    _print_diagnostics(str(plan_file), list(compiled.diagnostics), as_json)
    if not as_json:
        warnings = len(compiled.diagnostics)
        stderr.print(
            f"{plan_file}: ok, {len(compiled.steps)} steps, {warnings} warning(s)",
            highlight=False,
        )


@app.command()
def graph(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN.json")],
    tools: ToolsOption = None,
) -> None:
    """Print the plan's DAG as Mermaid text, the critical path (by step count) marked."""
    registry = _registry(tools)
    try:
        compiled = compile_plan(_read_plan(plan_file), registry)
    except PlanError as error:
        _print_diagnostics(str(plan_file), error, False)
        raise typer.Exit(EXIT_USAGE) from None
    path, length = critical_path(compiled.graph)
    labels = {
        sid: f"{sid}: {step.step.tool}"
        + (f" - {step.step.description}" if step.step.description else "")
        for sid, step in compiled.steps.items()
    }
    sys.stdout.write(mermaid(compiled.graph, labels, highlight=path))
    sys.stdout.write(f"%% critical path: {' -> '.join(map(str, path))} ({int(length)} steps)\n")


@app.command("exec")
def exec_command(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN.json")],
    tools: ToolsOption = None,
    param: Annotated[
        list[str] | None,
        typer.Option("--param", "-p", help="A plan param as NAME=VALUE (repeatable)."),
    ] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Allow only tools without effects.")
    ] = False,
    write_boundary: Annotated[
        list[Path] | None,
        typer.Option(
            "--write-boundary",
            help="A folder the run may write into (repeatable; default: the working directory).",
        ),
    ] = None,
    max_concurrency: Annotated[
        int | None, typer.Option("--max-concurrency", min=1, help="Steps at once across the run.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Compile and run a plan with no LLM; print each step's outcome."""
    registry = _registry(tools)
    boundary = WriteBoundary(write_boundary or [Path.cwd()])
    try:
        compiled = compile_plan(
            _read_plan(plan_file),
            registry,
            params=_parse_params(param),
            read_only=read_only,
            write_boundary=boundary,
        )
    except PlanError as error:
        _print_diagnostics(str(plan_file), error, as_json=False)
        raise typer.Exit(EXIT_USAGE) from None
    for line in diagnostic_lines(str(plan_file), list(compiled.diagnostics)):
        stderr.print(line, markup=False, highlight=False)

    progress = StepProgress(stderr, len(compiled.steps), enabled=stderr.is_terminal)
    with progress:
        result = anyio.run(
            lambda: run_plan(compiled, max_concurrency=max_concurrency, observers=[progress])
        )
    if as_json:
        sys.stdout.write(json.dumps(result.to_json_dict(), ensure_ascii=False, indent=2) + "\n")
    else:
        stdout.print(run_table(result))
        if result.output is not None:
            from plandag.scheduler.result import to_jsonable

            stdout.print_json(json.dumps(to_jsonable(result.output), ensure_ascii=False))
    raise typer.Exit(EXIT_CODES.get(result.status, 1))


@app.command("tools")
def list_tools(tools: ToolsOption = None, as_json: JsonOption = False) -> None:
    """List the registered tools and check kinds (built-in, NF-e, and --tools files)."""
    registry = _registry(tools)
    if as_json:
        data = {
            "tools": [
                {
                    "name": item.name,
                    "description": item.description,
                    "effects": item.effects,
                    "idempotent": item.idempotent,
                    "args": item.json_schema(),
                }
                for item in registry.tools.values()
            ],
            "checks": [
                {
                    "kind": d.name,
                    "description": d.description,
                    "args": d.args_model.model_json_schema(),
                }
                for d in registry.checks.values()
            ],
        }
        sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        return
    for item in sorted(registry.tools.values(), key=lambda t: t.name):
        arguments = ", ".join(f.alias or n for n, f in item.args_model.model_fields.items())
        stdout.print(f"tool  {item.name}({arguments})  effects={item.effects}  {item.description}")
    for definition in sorted(registry.checks.values(), key=lambda d: d.name):
        stdout.print(f"check {definition.name}  {definition.description}")


@extract_app.command("nfe")
def extract_nfe(
    paths: Annotated[
        list[str], typer.Argument(metavar="PATH...", help="NF-e/NFC-e XML files, folders or globs.")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Output file: .jsonl (default) or .csv.")
    ],
    output_format: Annotated[
        str | None,
        typer.Option("--format", help="jsonl or csv (default: from the output's suffix)."),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="Documents at once.")] = 4,
    resume: Annotated[
        bool, typer.Option("--resume", help="Skip inputs whose sha256 already has a record.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Extract NF-e/NFC-e invoices into records (one per invoice, one error row per bad input)."""
    from plandag.extract.nfe.batch import (
        batch_exit_code,
        expand_inputs,
        extract_batch,
        render_summary,
    )

    if output_format not in (None, "jsonl", "csv"):
        _fail(f"--format must be jsonl or csv, not {output_format!r}")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    progress = Progress(
        "[bold]documents",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,
    )
    task = progress.add_task("documents", total=None)

    def on_progress(done: int, total: int) -> None:
        progress.update(task, completed=done, total=total)

    try:
        files, missing = expand_inputs(paths)
        with progress:
            summary = anyio.run(
                functools.partial(
                    extract_batch,
                    files,
                    output,
                    format=output_format,
                    jobs=jobs,
                    resume=resume,
                    missing=missing,
                    on_progress=on_progress,
                )
            )
    except InputError as error:
        _fail(str(error))
    if as_json:
        sys.stdout.write(json.dumps(summary.to_json_dict(), ensure_ascii=False, indent=2) + "\n")
    else:
        stdout.print(render_summary(summary))
        stdout.print(f"records written to {output}")
    raise typer.Exit(batch_exit_code(summary))


def main() -> None:
    """Entry point of the ``plandag`` console script."""
    try:
        app()
    except KeyboardInterrupt:
        stderr.print("interrupted")
        raise SystemExit(130) from None
