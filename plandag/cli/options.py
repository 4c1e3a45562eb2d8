"""The options the commands share (their flags, help and parsing written once), the registry
of a command (``--tools``), and a plain :func:`fail`. Kept light: importing this module
imports typer and nothing of plandag's, so a command that needs them costs no start-up time.
The model options (``--provider``, ``--model``, ``--base-url``...) and the client set-up are
in :mod:`plandag.cli.models_options`."""

from __future__ import annotations

import contextlib
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from plandag.config import McpServerSpec
    from plandag.tools.registry import Registry

__all__ = [
    "EXIT_USAGE",
    "ApproveOption",
    "BoundaryOption",
    "BreakerAfterOption",
    "EscalateOption",
    "FollowLinksOption",
    "HeartbeatEveryOption",
    "HeartbeatOption",
    "HttpAllowOption",
    "JsonOption",
    "MaxBlockedOption",
    "MaxChunksOption",
    "MaxConcurrencyOption",
    "MaxCostOption",
    "MaxInputBytesOption",
    "MaxPlanBytesOption",
    "MaxPlanningSecondsOption",
    "MaxSecondsOption",
    "MaxStepsOption",
    "MaxTokensOption",
    "MaxUnpackedBytesOption",
    "McpOption",
    "ParamOption",
    "PlanArgument",
    "PlanCostFactorOption",
    "PlanTimeFactorOption",
    "PlannerMaxTokensOption",
    "QuietOption",
    "ReadOnlyOption",
    "RedactOption",
    "RetriesOption",
    "RpmOption",
    "SaveRepairsOption",
    "SlowStartOption",
    "StallAfterOption",
    "StopOnStallOption",
    "StoreOption",
    "ToolsOption",
    "TotalReplanBelowOption",
    "TpmOption",
    "VerboseOption",
    "build_registry",
    "command_lifetime",
    "fail",
    "mcp_servers",
    "register_mcp_servers",
]

EXIT_USAGE = 2
"""Exit code for unusable arguments (ARCHITECTURE.md, "States and exit codes")."""

StoreOption = Annotated[
    Path | None,
    typer.Option(
        "--store",
        metavar="PATH",
        help="The run store (SQLite); default $PLANDAG_STORE, else the user's data folder.",
    ),
]

PlanArgument = Annotated[
    Path, typer.Argument(metavar="PLAN.json", help="The plan file (JSON, see `plandag schema`).")
]
ToolsOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--tools",
        metavar="FILE.py|APP",
        help="A Python file whose @tool and @check functions are registered, or an installed "
        "application whose tools and checks are (nfe; see `plandag tools`) (repeatable).",
    ),
]
McpOption = Annotated[
    list[str] | None,
    typer.Option(
        "--mcp",
        metavar="[NAME=]COMMAND|URL",
        help="An MCP server whose tools become plan tools named NAME_TOOL: a command started "
        "over stdio ('python server.py', no shell) or a streamable HTTP URL; NAME= names it "
        "(default: the name the server gives itself). Repeatable. The servers of the "
        "project's [[mcp]] tables start too, once the file is trusted (`plandag trust FILE`).",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
QuietOption = Annotated[
    bool,
    typer.Option(
        "--quiet", "-q", help="Log only errors on stderr (default: warnings; PLANDAG_LOG)."
    ),
]
"""``-q``: every command has it (:func:`plandag.cli.logging_options.add_verbosity`)."""
VerboseOption = Annotated[
    int,
    typer.Option(
        "--verbose",
        "-v",
        count=True,
        show_default=False,
        help="Log more on stderr: -v informational messages, -vv debugging ones too "
        "(PLANDAG_LOG=debug|info|warning|error sets the level without a flag).",
    ),
]
"""``-v``/``-vv``: every command has it (:func:`plandag.cli.logging_options.add_verbosity`)."""
ParamOption = Annotated[
    list[str] | None,
    typer.Option(
        "--param", "-p", metavar="NAME=VALUE", help="A plan param (repeatable; once per NAME)."
    ),
]
ReadOnlyOption = Annotated[
    bool, typer.Option("--read-only", help="Allow only tools without effects.")
]
BoundaryOption = Annotated[
    list[str] | None,
    typer.Option(
        "--write-boundary",
        metavar="SPEC",
        help="Where the run may write: a folder, a path glob (data/*.json) or a URL host "
        "(https://api.example.com); repeatable. Default: the working directory (exec), the "
        "output's folder (extract).",
    ),
]
HttpAllowOption = Annotated[
    list[str] | None,
    typer.Option(
        "--http-allow",
        metavar="HOST",
        help="A host HTTP tools may reach: a glob of host names (api.example.com, "
        "*.example.org, 127.0.0.1:8080); repeatable. Hosts of the plan's literal URLs are "
        "added, except with --read-only (which reaches only these).",
    ),
]


def _brake_parser(flag: str, unit: str, *, integer: bool, strict: bool) -> Any:
    """A typer parser for a brake flag: a number (> 0 when ``strict``, else >= 0), or
    ``none`` to lift the brake (:data:`plandag.brakes.UNLIMITED`)."""

    def parse(text: str) -> Any:
        from plandag.brakes import LIFT, UNLIMITED

        if text.strip().lower() == LIFT:
            return UNLIMITED
        bound = "> 0" if strict else ">= 0"
        expected = f"{'a whole number' if integer else 'a number'} of {unit} {bound}, or none"
        try:
            number: float = int(text) if integer else float(text)
        except ValueError:
            raise typer.BadParameter(f"{text!r}: expected {expected}") from None
        if not math.isfinite(number) or number < 0 or (strict and number == 0):
            raise typer.BadParameter(f"{text!r}: expected {expected}")
        return number

    return parse


MaxSecondsOption = Annotated[
    Any,
    typer.Option(
        "--max-seconds",
        metavar="S|none",
        parser=_brake_parser("--max-seconds", "seconds", integer=False, strict=True),
        help="Wall-clock cap, seconds from the start (default 900 for exec and run; none "
        "lifts it).",
    ),
]
MaxCostOption = Annotated[
    Any,
    typer.Option(
        "--max-cost",
        metavar="USD|none",
        parser=_brake_parser("--max-cost", "US dollars", integer=False, strict=False),
        help="Cost cap in US dollars, priced models only (default 1.00 per run, 5.00 per "
        "extract batch; none lifts it).",
    ),
]
MaxTokensOption = Annotated[
    Any,
    typer.Option(
        "--max-tokens",
        metavar="N|none",
        parser=_brake_parser("--max-tokens", "tokens", integer=True, strict=False),
        help="Token cap, every model (default 200,000 per run, 1,000,000 per extract batch; "
        "none lifts it).",
    ),
]
RpmOption = Annotated[
    float | None,
    typer.Option(
        "--rpm",
        metavar="N",
        help="Requests per minute to the model provider, shared by every model call of "
        "the command (off by default; rpm in [rate_limit] of the config).",
    ),
]
TpmOption = Annotated[
    float | None,
    typer.Option(
        "--tpm",
        metavar="N",
        help="Tokens per minute to the model provider (each call's prompt estimate plus "
        "its max_tokens), shared like --rpm (off by default; tpm in [rate_limit]).",
    ),
]
MaxStepsOption = Annotated[
    int | None,
    typer.Option(
        "--max-steps",
        metavar="N",
        min=1,
        help="The most steps a plan may have, a run's replans included (500); a plan over "
        "it is refused before anything runs.",
    ),
]
MaxPlanBytesOption = Annotated[
    int | None,
    typer.Option(
        "--max-plan-bytes",
        metavar="N",
        min=1,
        help="The largest plan file read, in bytes (16 MiB); a plan file must also be a "
        "regular file (not a pipe, a device or a folder).",
    ),
]
MaxConcurrencyOption = Annotated[
    int | None,
    typer.Option("--max-concurrency", metavar="N", min=1, help="Steps at once across a run."),
]
HeartbeatOption = Annotated[
    Path | None,
    typer.Option("--heartbeat", metavar="FILE", help="Write heartbeat events to FILE (JSONL)."),
]
HeartbeatEveryOption = Annotated[
    float | None,
    typer.Option(
        "--heartbeat-every", metavar="S", min=0.001, help="Seconds between heartbeats (10)."
    ),
]
StallAfterOption = Annotated[
    Any,
    typer.Option(
        "--stall-after",
        metavar="S|none",
        parser=_brake_parser("--stall-after", "seconds", integer=False, strict=True),
        help="Seconds without a finished step that make a stall (default 120; 300 for "
        "extract; none: no stall detection).",
    ),
]
StopOnStallOption = Annotated[
    bool | None,
    typer.Option(
        "--stop-on-stall/--no-stop-on-stall",
        help="Stop the run at the first stall, exit 3 (default); --no-stop-on-stall keeps "
        "the stall reports without stopping.",
    ),
]
BreakerAfterOption = Annotated[
    int | None,
    typer.Option(
        "--breaker-after",
        metavar="K",
        min=0,
        help="A tool or HTTP host whose steps fail K times in a row is down for the run: "
        "steps needing it fail at once (3; 0: no circuit breaker).",
    ),
]
MaxBlockedOption = Annotated[
    int | None,
    typer.Option(
        "--max-blocked",
        metavar="N",
        min=0,
        help="An intent (a step's description, else its tool and arguments) that fails N "
        "times across replans is not replanned again: the run escalates (3; 0: never).",
    ),
]
TotalReplanBelowOption = Annotated[
    float | None,
    typer.Option(
        "--total-replan-below",
        metavar="FRACTION",
        min=0.0,
        max=1.0,
        help="A replan asked for while fewer than FRACTION of the steps have completed plans "
        "again from the goal (total) instead of replacing the failed part (off).",
    ),
]
PlanCostFactorOption = Annotated[
    str | None,
    typer.Option(
        "--plan-cost-factor",
        metavar="X|none",
        help="Stop and escalate when spend passes X times the plan's estimated cost (2); "
        "none lifts it.",
    ),
]
PlanTimeFactorOption = Annotated[
    str | None,
    typer.Option(
        "--plan-time-factor",
        metavar="X|none",
        help="Stop and escalate when the run takes X times the plan's estimated time (3; "
        "never below 5 s); none lifts it.",
    ),
]
SlowStartOption = Annotated[
    str | None,
    typer.Option(
        "--slow-start",
        metavar="FRACTION|none",
        help="Until a first model call has settled, the calls in flight may reserve only "
        "this fraction of the cost and token caps (0.15): a provider that reports more than "
        "its calls reserved cannot take the spend far past the cap; none turns it off.",
    ),
]
PlannerMaxTokensOption = Annotated[
    int | None,
    typer.Option(
        "--planner-max-tokens",
        metavar="N",
        min=1,
        help="Output tokens a planning call may take, reserved against the caps before it is "
        "sent (4096, sized to plans; planner_max_tokens in the config).",
    ),
]
FollowLinksOption = Annotated[
    bool,
    typer.Option(
        "--follow-links",
        help="Read inputs that are symbolic links leading outside the folders and files "
        "given (default: a link_outside error row, the link not read).",
    ),
]
MaxInputBytesOption = Annotated[
    Any,
    typer.Option(
        "--max-input-bytes",
        metavar="N|none",
        parser=_brake_parser("--max-input-bytes", "bytes", integer=True, strict=True),
        help="The largest input read, in bytes (64 MiB); a larger one is a too_large row.",
    ),
]
MaxUnpackedBytesOption = Annotated[
    Any,
    typer.Option(
        "--max-unpacked-bytes",
        metavar="N|none",
        parser=_brake_parser("--max-unpacked-bytes", "bytes", integer=True, strict=True),
        help="The most bytes a .docx may unpack to (256 MiB), checked before it is "
        "parsed; a larger one is a too_large row.",
    ),
]
MaxChunksOption = Annotated[
    Any,
    typer.Option(
        "--max-chunks",
        metavar="N|none",
        parser=_brake_parser("--max-chunks", "chunks", integer=True, strict=True),
        help="The most chunks one contract may have (100); a longer one is a "
        "too_many_chunks row, found before it is chunked.",
    ),
]
MaxPlanningSecondsOption = Annotated[
    Any,
    typer.Option(
        "--max-planning-seconds",
        metavar="S|none",
        parser=_brake_parser("--max-planning-seconds", "seconds", integer=False, strict=True),
        help="The most seconds from reading a contract until its plan is compiled (60); "
        "past it, a planning_timeout row.",
    ),
]
RetriesOption = Annotated[
    int | None,
    typer.Option(
        "--retries", metavar="N", min=0, help="Retries of a failed step after its first (2)."
    ),
]
SaveRepairsOption = Annotated[
    Path | None,
    typer.Option(
        "--save-repairs",
        metavar="DIR",
        help="Write each repaired plan that succeeded into DIR (NAME.HASH.json and a "
        "NAME.HASH.repair.json sidecar saying what failed and what changed).",
    ),
]
ApproveOption = Annotated[
    str | None,
    typer.Option(
        "--approve",
        metavar="ask|auto|never",
        help="Plans with effects: ask a person (default), auto-approve writes "
        "(irreversible effects still ask), or never (save awaiting_approval, exit 4).",
    ),
]
EscalateOption = Annotated[
    str | None,
    typer.Option(
        "--escalate",
        metavar="person|never",
        help="A run that cannot go on by itself (replan caps hit, no valid replan, an "
        "irreversible step's outcome unknown): hand it to a person (default: escalated, "
        "exit 5, listed by `plandag inbox`), or never (gave_up, exit 1).",
    ),
]
RedactOption = Annotated[
    bool,
    typer.Option("--redact", help="Mask personal data (CPF, e-mail, phone, names) in the trace."),
]


def command_lifetime() -> contextlib.ExitStack:
    """A new lifetime for the command about to run (the root callback calls it and closes
    the stack returned when the command ends): the MCP servers :func:`build_registry`
    starts stop when it closes (:func:`plandag.tools.lifetime.operation_lifetime`)."""
    from plandag.tools.lifetime import operation_lifetime

    return operation_lifetime()


def mcp_servers(
    flags: Sequence[str] | None, stored: Sequence[Any] = (), *, project: bool = True
) -> list[McpServerSpec]:
    """The MCP servers a command starts: the project's ``[[mcp]]`` tables (with
    ``project``; the file must be trusted), then each ``--mcp`` flag, then ``stored`` (the
    specs a stored run recorded, as JSON: a resume starts the servers the run started).

    Raises:
        InputError: a flag or a table is malformed, or the project file that names servers
            is not trusted (the message names ``plandag trust PATH``).
    """
    from plandag.config import McpServerSpec, load_mcp_config, parse_mcp_flag

    specs: list[McpServerSpec] = []
    if project:
        config = load_mcp_config()
        if config is not None:
            from plandag.trust import require_trusted

            named = ", ".join(
                f"{spec.name or '(unnamed)'} ({spec.describe()})" for spec in config.servers
            )
            require_trusted(config.path, f"MCP servers to start: {named}")
            specs.extend(config.servers)
    specs.extend(parse_mcp_flag(flag) for flag in flags or ())
    specs.extend(
        spec if isinstance(spec, McpServerSpec) else McpServerSpec.from_json(spec)
        for spec in stored
    )
    return specs


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``error: message`` on standard error and exit with ``code`` (default 2)."""
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)


def build_registry(
    tools: Iterable[Path] | None,
    *,
    applications: Iterable[str] = (),
    resolve_installed: bool = True,
    withhold: Iterable[str] = (),
    mcp: Sequence[McpServerSpec] = (),
    mcp_timeout: float = 60.0,
) -> Registry:
    """The registry of a command: the built-in tools and checks less those ``withhold``
    names, the installed ``applications`` of the job at hand, each ``--tools`` entry (a
    ``.py`` file, or the name of an installed application: ``--tools nfe``), and the tools
    of the MCP servers ``mcp`` (started once per command, stopped when it ends:
    :func:`command_lifetime`).

    Args:
        tools: the ``--tools`` entries, in order (repeats are loaded once).
        applications: entry-point names of the ``plandag.tools`` group to register.
        resolve_installed: find the tools of other installed applications when a plan names
            them (stored plans: ``check``, ``exec``, ``resume``); False where a model writes
            the plans from what it is shown (``run``, ``plan``).
        withhold: built-in tools to leave out (:meth:`Registry.withhold`), before the
            ``--tools`` entries are loaded (a research run leaves out the file and HTTP
            tools).
        mcp: the MCP servers (:func:`mcp_servers`).
        mcp_timeout: seconds a call to an MCP tool may take when its server's table says
            nothing (the ``mcp_timeout`` setting).

    Raises:
        ToolLoadError: an entry is neither a loadable file nor an installed application, an
            MCP server did not start, or a tool's name clashes.
    """
    from plandag.tools.registry import registry_with

    registry = registry_with(
        tools, applications=applications, resolve_installed=resolve_installed, withhold=withhold
    )
    if mcp:
        register_mcp_servers(registry, mcp, mcp_timeout)
    return registry


def register_mcp_servers(
    registry: Registry, specs: Sequence[McpServerSpec], timeout: float
) -> list[str]:
    """Start the MCP servers ``specs`` for the command's length (once per command:
    :func:`command_lifetime`) and add their tools to ``registry``
    (:func:`plandag.tools.lifetime.register_mcp_servers`).

    Raises:
        ToolLoadError: a server did not start, or a tool's name clashes.
    """
    from plandag.tools.lifetime import register_mcp_servers as register

    return register(registry, specs, timeout)
