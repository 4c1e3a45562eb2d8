"""``plandag tools``: the registered tools and check kinds, every installed application's
included."""

from __future__ import annotations

import json
import sys

import typer

from plandag.cli.common import command_registry, stdout
from plandag.cli.options import JsonOption, McpOption, ToolsOption
from plandag.tools.registry import installed_applications

__all__ = ["list_tools", "register"]


def list_tools(
    tools: ToolsOption = None, mcp: McpOption = None, as_json: JsonOption = False
) -> None:
    """List the registered tools and check kinds (built-in, NF-e, and --tools files).

    Every installed application's are listed (a planner is given only the built-ins, its
    job's and --tools'), and the tools of the MCP servers (--mcp, and the project's
    [[mcp]] tables once the file is trusted) with where each comes from.
    """
    registry = command_registry(tools, applications=installed_applications(), mcp=mcp or [])
    if as_json:
        data = {
            "tools": [
                {
                    "name": item.name,
                    "description": item.description,
                    "effects": item.effects,
                    "idempotent": item.idempotent,
                    "args": item.json_schema(),
                    **(
                        {
                            "origin": item.origin,
                            "egress": item.egress,
                            "taint_source": item.taint_source,
                            "schema_sha256": item.schema_sha256,
                        }
                        if item.origin is not None
                        else {}
                    ),
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
        stdout.print(f"tool  {item.name}({arguments})  effects={item.effects}", markup=False)
        if item.origin is not None:
            flags = [
                word
                for word, on in (("egress", item.egress), ("taint source", item.taint_source))
                if on
            ]
            stdout.print(
                f"      from {item.origin}" + (f"; {', '.join(flags)}" if flags else ""),
                markup=False,
            )
        stdout.print(f"      {item.description}", markup=False)
    for definition in sorted(registry.checks.values(), key=lambda d: d.name):
        stdout.print(f"check {definition.name}", markup=False)
        stdout.print(f"      {definition.description}", markup=False)


def register(app: typer.Typer) -> None:
    """Add ``tools`` to ``app`` (the ``plandag`` typer app)."""
    app.command("tools")(list_tools)
