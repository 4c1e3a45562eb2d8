"""``plandag schema``, ``check`` and ``graph``: the plan format, a plan compiled without
running it (every diagnostic, like a compiler), and its DAG. Nothing here plans, runs or
opens the run store."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from plandag.cli.common import (
    EXIT_USAGE,
    command_registry,
    command_settings,
    fail,
    parse_params,
    read_plan_file,
    report_plan_error,
    stderr,
    write_boundary_for,
)
from plandag.cli.display import diagnostic_lines
from plandag.cli.options import (
    BoundaryOption,
    HttpAllowOption,
    JsonOption,
    MaxPlanBytesOption,
    MaxStepsOption,
    McpOption,
    ParamOption,
    PlanArgument,
    ReadOnlyOption,
    ToolsOption,
)
from plandag.compiler import compile_plan
from plandag.dag.graph import critical_path, mermaid
from plandag.dag.plan import Plan
from plandag.errors import PlanError
from plandag.scheduler.estimate import estimate_plan

__all__ = ["check", "graph", "register", "schema"]


def schema(
    which: Annotated[
        str,
        typer.Argument(metavar="[plan|nfe]", help="plan (the plan format) or nfe (the record)."),
    ] = "plan",
) -> None:
    """Print a JSON Schema: the plan format or the NF-e record."""
    if which == "plan":
        document = Plan.model_json_schema()
    elif which == "nfe":
        from plandag.extract.nfe.record import nfe_record_json_schema

        document = nfe_record_json_schema()
    else:
        fail(f"unknown schema {which!r}; choose plan or nfe")
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


def check(
    plan_file: PlanArgument,
    tools: ToolsOption = None,
    mcp: McpOption = None,
    param: ParamOption = None,
    read_only: ReadOnlyOption = False,
    write_boundary: BoundaryOption = None,
    http_allow: HttpAllowOption = None,
    max_steps: MaxStepsOption = None,
    max_plan_bytes: MaxPlanBytesOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compile a plan without running it; print every diagnostic like a compiler.

    With --param, param values are checked too (missing, unknown, wrong type); without,
    the params a run must be given are listed after ``ok``. At most
    100 diagnostics are listed, then one that counts the rest. The plan's estimate of cost
    and time is printed from the tools' declared figures (exec and run also use the
    durations measured in the run store).
    """
    registry = command_registry(tools, mcp=mcp or [])
    settings = command_settings(
        {
            "write_boundary": write_boundary,
            "http_allow": http_allow,
            "max_steps": max_steps,
            "max_plan_bytes": max_plan_bytes,
        }
    )
    text = read_plan_file(plan_file, settings["max_plan_bytes"])
    try:
        compiled = compile_plan(
            text,
            registry,
            params=parse_params(param) if param else None,
            read_only=read_only,
            write_boundary=write_boundary_for(settings["write_boundary"], Path.cwd()),
            http_allow=settings["http_allow"],
            max_steps=settings["max_steps"],
        )
    except PlanError as error:
        if as_json:
            document = [diagnostic.as_dict() for diagnostic in error.diagnostics]
            sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
            raise typer.Exit(EXIT_USAGE) from None
        report_plan_error(str(plan_file), error, as_json=False, tools=tools)
    if as_json:
        document = [diagnostic.as_dict() for diagnostic in compiled.diagnostics]
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
        return
    for line in diagnostic_lines(str(plan_file), list(compiled.diagnostics)):
        stderr.print(line, markup=False)
    stderr.print(f"{plan_file}: {estimate_plan(compiled).describe()}", markup=False)
    stderr.print(
        f"{plan_file}: ok, {_count(len(compiled.steps), 'step')}, "
        f"{_count(len(compiled.diagnostics), 'warning')}"
    )
    required = [
        f"--param {name}=VALUE ({spec.type})"
        for name, spec in compiled.plan.params.items()
        if spec.is_required and not param
    ]
    if required:  # not an error here: values are given when the plan runs
        stderr.print(f"{plan_file}: a run needs {', '.join(required)}", markup=False)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def graph(
    plan_file: PlanArgument,
    tools: ToolsOption = None,
    mcp: McpOption = None,
    max_steps: MaxStepsOption = None,
    max_plan_bytes: MaxPlanBytesOption = None,
    as_json: JsonOption = False,
) -> None:
    """Print the plan's DAG as Mermaid text, its critical path (by step count) marked, and
    the plan's estimate of cost and time (from the tools' declared figures).

    With --json, one document: ``steps`` (each ``id``, ``tool``, ``description``,
    ``parents``: declared and implied), ``critical_path`` (``steps``, ``length`` in
    steps), ``estimate`` (as stored with a plan version) and ``mermaid`` (the text);
    a plan that does not compile gives ``{"status": "invalid_plan", "diagnostics"}``.
    """
    registry = command_registry(tools, mcp=mcp or [])
    settings = command_settings({"max_steps": max_steps, "max_plan_bytes": max_plan_bytes})
    text = read_plan_file(plan_file, settings["max_plan_bytes"])
    try:
        compiled = compile_plan(text, registry, max_steps=settings["max_steps"])
    except PlanError as error:
        report_plan_error(str(plan_file), error, as_json=as_json, tools=tools)
    path, length = critical_path(compiled.graph)
    labels = {}
    for step_id, compiled_step in compiled.steps.items():
        description = compiled_step.step.description
        labels[step_id] = f"{step_id}: {compiled_step.step.tool}" + (
            f" - {description}" if description else ""
        )
    diagram = mermaid(compiled.graph, labels, highlight=path)
    estimate = estimate_plan(compiled)
    if as_json:
        document = {
            "plan": str(plan_file),
            "steps": [
                {
                    "id": step_id,
                    "tool": compiled.steps[step_id].step.tool,
                    "description": compiled.steps[step_id].step.description,
                    "parents": list(compiled.steps[step_id].parents),
                }
                for step_id in compiled.graph.nodes
            ],
            "critical_path": {"steps": list(path), "length": int(length)},
            "estimate": estimate.as_json(),
            "mermaid": diagram,
        }
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
        return
    sys.stdout.write(diagram)
    route = " -> ".join(map(str, path)) or "none (empty plan)"
    sys.stdout.write(f"%% critical path: {route} ({_count(int(length), 'step')})\n")
    sys.stdout.write(f"%% {estimate.describe()}\n")


def register(app: typer.Typer) -> None:
    """Add ``schema``, ``check`` and ``graph`` to ``app`` (the ``plandag`` typer app)."""
    app.command("schema")(schema)
    app.command("check")(check)
    app.command("graph")(graph)
