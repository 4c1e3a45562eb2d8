"""MkDocs hooks for the documentation site: pages generated from the code itself.

- ``<!-- plandag:cli-reference -->`` becomes the ``--help`` of every command of the command
  line, read from the commands themselves (so the reference cannot drift from the CLI);
- ``<!-- plandag:exit-codes -->`` becomes the table of run states and their exit codes
  (:data:`plandag.cli.common.EXIT_CODES`).

Used by ``mkdocs.yml`` (``hooks:``); :func:`cli_reference` and :func:`exit_code_table` are
also what the tests compare the built pages with.
"""

from __future__ import annotations

from typing import Any

CLI_MARKER = "<!-- plandag:cli-reference -->"
EXIT_MARKER = "<!-- plandag:exit-codes -->"
WIDTH = 100


def _commands(group: Any, ctx: Any, prefix: list[str]) -> list[tuple[list[str], Any, Any]]:
    """Every command under ``group``, depth first, each with its click context."""
    import typer._click as click

    found: list[tuple[list[str], Any, Any]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if command is None or command.hidden:
            continue
        sub = click.Context(command, info_name=name, parent=ctx, max_content_width=WIDTH)
        found.append(([*prefix, name], command, sub))
        if hasattr(command, "list_commands"):
            found.extend(_commands(command, sub, [*prefix, name]))
    return found


def cli_reference() -> str:
    """The command reference in Markdown: one section per command, its ``--help`` verbatim.

    Returns:
        Markdown text: ``## plandag NAME`` headings, each followed by a ``text`` block.
    """
    import typer._click as click
    import typer.main

    from plandag.cli.app import app

    root = typer.main.get_command(app)
    ctx = click.Context(root, info_name="plandag", max_content_width=WIDTH, terminal_width=WIDTH)
    parts = ["## plandag", "", "```text", root.get_help(ctx).rstrip(), "```", ""]
    for words, command, sub in _commands(root, ctx, ["plandag"]):
        sub.terminal_width = WIDTH
        parts += [f"## {' '.join(words)}", "", "```text", command.get_help(sub).rstrip(), "```", ""]
    return "\n".join(parts)


def exit_code_table() -> str:
    """The run states and the exit code of each, as a Markdown table (from
    :data:`plandag.cli.common.EXIT_CODES`)."""
    from plandag.cli.common import EXIT_CODES

    rows = ["| run status | exit code |", "|---|---|"]
    rows += [f"| `{status}` | {code} |" for status, code in EXIT_CODES.items()]
    return "\n".join(rows)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: fill the generated parts of a page."""
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if EXIT_MARKER in markdown:
        markdown = markdown.replace(EXIT_MARKER, exit_code_table())
    return markdown
