"""``plandag trust FILE``: the MCP servers a project file's ``[[mcp]]`` tables name may
start (:mod:`plandag.trust`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from plandag.cli.common import fail, stdout
from plandag.cli.options import JsonOption
from plandag.errors import InputError

__all__ = ["register", "trust_command"]


def trust_command(
    path: Annotated[
        Path,
        typer.Argument(
            metavar="FILE",
            help="The project file whose [[mcp]] servers may start: plandag.toml, or "
            "pyproject.toml with [tool.plandag].",
        ),
    ],
    as_json: JsonOption = False,
) -> None:
    """Trust a project file: the MCP servers its [[mcp]] tables name may start.

    A command run in a project whose plandag.toml (or pyproject.toml's [tool.plandag]) names
    MCP servers exits 2 until that file is trusted: read it first, then trust it here. The
    file's SHA-256 is recorded under its path in the user's trust list (trusted.json in the
    user's data folder); any change to the file needs trusting again. Servers given with
    --mcp on the command line need no trust.
    """
    from plandag.config import load_mcp_config
    from plandag.trust import trust, trust_path

    try:
        digest = trust(path)
        config = load_mcp_config(path.resolve().parent)
    except InputError as error:
        fail(str(error))
    servers = config.servers if config is not None and config.path == path.resolve() else ()
    if as_json:
        document = {
            "file": str(path.resolve()),
            "sha256": digest,
            "trust_list": str(trust_path()),
            "servers": [spec.as_json() for spec in servers],
        }
        sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
        return
    stdout.print(f"trusted {path.resolve()} (sha256 {digest[:12]}...)", markup=False)
    for spec in servers:
        stdout.print(
            f"  MCP server {spec.name or '(its own name)'}: {spec.describe()}", markup=False
        )
    if not servers:
        stdout.print("  it names no MCP server", markup=False)


def register(app: typer.Typer) -> None:
    """Add ``trust`` to ``app`` (the ``plandag`` typer app)."""
    app.command("trust")(trust_command)
