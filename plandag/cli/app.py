"""The ``plandag`` command line (typer).

Exit codes (ARCHITECTURE.md, "States and exit codes"): ``exec`` gives 0 succeeded; 1 failed,
gave_up or abandoned; 2 unusable arguments or a plan that does not compile; 3 timed_out or
budget_exceeded; 4 awaiting_approval or rejected; 5 escalated; 130 SIGINT; 143 SIGTERM.
``extract`` gives 0 when every input got a record (whatever the records say), 2 for
unusable arguments, 3 when its ``--max-seconds`` ran out first, 130/143 when interrupted.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from plandag.brakes import JOB_BRAKES, LIFT, UNLIMITED, brakes_line
from plandag.cli.commands import LazyGroup, root_callback
from plandag.cli.display import StepProgress, diagnostic_lines, run_table
from plandag.cli.options import build_registry
from plandag.cli.secret_output import SecretMaskingConsole
from plandag.cli.signals import Interruptible, exit_code_for_signal
from plandag.cli.store_command import (
    ApproveOption,
    EscalateOption,
    RedactOption,
    StoreOption,
    durable_exec,
    escalation_hooks,
    run_options,
)
from plandag.compiler import CompiledPlan, compile_plan
from plandag.config import Settings, load_settings, shown
from plandag.dag.graph import critical_path, mermaid
from plandag.dag.plan import Plan
from plandag.errors import InputError, PlanError, ToolLoadError
from plandag.scheduler.estimate import estimate_plan
from plandag.scheduler.result import RunStatus, to_jsonable
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry, installed_applications
from plandag.trace.redact import scrub_secrets

if TYPE_CHECKING:
    from plandag.models import LLMClient
    from plandag.scheduler import RunLimits, RunResult
    from plandag.scheduler.events import Observer

__all__ = ["EXIT_CODES", "app", "main"]

EXIT_CODES: dict[RunStatus, int] = {
    "succeeded": 0,
    "failed": 1,
    "gave_up": 1,
    "timed_out": 3,
    "budget_exceeded": 3,
    "awaiting_approval": 4,
    "rejected": 4,
    "escalated": 5,
    "abandoned": 1,
    "interrupted": 130,
}
EXIT_USAGE = 2

app = typer.Typer(
    name="plandag",
    help="Compile an LLM's plan into a validated DAG and run it: parallel, checked, bounded.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=LazyGroup,  # the commands of other modules are imported when invoked
)
app.callback()(root_callback)

stdout = SecretMaskingConsole(soft_wrap=True, highlight=False)
stderr = SecretMaskingConsole(stderr=True, soft_wrap=True, highlight=False)

# -- options shared by several commands --------------------------------------------------

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
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
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
RetriesOption = Annotated[
    int | None,
    typer.Option(
        "--retries", metavar="N", min=0, help="Retries of a failed step after its first (2)."
    ),
]
PlannerOption = Annotated[
    str | None,
    typer.Option(
        "--planner",
        metavar="anthropic|openai",
        help="Attach a planner: the plan runs with no model call; only a step that fails on "
        "an input is shown to the model, whose repair runs for that input. The key comes from "
        "ANTHROPIC_API_KEY (or OPENAI_API_KEY).",
    ),
]
PlannerModelOption = Annotated[
    str | None,
    typer.Option(
        "--model", metavar="NAME", help="The planner's model (anthropic: claude-sonnet-4-6)."
    ),
]
PlannerUrlOption = Annotated[
    str | None,
    typer.Option("--base-url", metavar="URL", help="The planner provider API's base URL."),
]
ProviderOption = Annotated[
    str | None,
    typer.Option(
        "--provider",
        metavar="anthropic|openai",
        help="The model provider of the plan's llm and agent steps (default: --planner's, "
        "else anthropic); its key (ANTHROPIC_API_KEY, OPENAI_API_KEY) is checked before "
        "anything runs.",
    ),
]
ExecModelOption = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="NAME",
        help="The model: the planner's with --planner (anthropic: claude-sonnet-4-6); with "
        "--provider openai, also the default of the plan's llm and agent steps.",
    ),
]
ExecUrlOption = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        metavar="URL",
        help="The provider API's base URL (the planner's, and the llm and agent steps').",
    ),
]
ExecutorModelOption = Annotated[
    str | None,
    typer.Option(
        "--executor-model",
        metavar="NAME",
        help="The model of llm and agent steps that name none (default: claude-haiku-4-5 "
        "with anthropic, --model with openai).",
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


def _fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    from rich.markup import escape

    stderr.print(f"[red]error:[/] {escape(message)}", markup=True, highlight=False)
    raise typer.Exit(code)


def _is_text(value: str) -> bool:
    """False for a str holding a lone surrogate: bytes of a path that were not UTF-8
    (Python keeps them as surrogate escapes), which no hash, store or terminal takes."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _settings(flags: dict[str, Any], job: str = "exec") -> Settings:
    """The settings of a command: defaults, project files, then ``flags`` (each flag's
    text is valid UTF-8: :func:`plandag.cli.commands.refuse_words_not_utf8` saw it)."""
    try:
        return load_settings(job=job).with_flags(flags)
    except InputError as error:
        _fail(str(error))


def print_brakes(settings: Settings, boundary: str) -> None:
    """Print the run's brakes on stderr, one line, with how to lift each (at the start of
    every run: ``exec``, ``run``, ``extract``)."""
    stderr.print(
        brakes_line(
            max_cost_usd=settings["max_cost"],
            max_tokens=settings["max_tokens"],
            max_seconds=settings["max_seconds"],
            stall_after=settings["stall_after"],
            stop_on_stall=settings["stop_on_stall"],
            boundary=boundary,
            per=JOB_BRAKES[settings.job].per,
        ),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def boundary_words(specs: list[str] | None, default: Path) -> str:
    """The write boundary as printed in the brakes line: each spec, or the default folder
    (``./`` for the working directory)."""
    if specs:
        return ", ".join(specs)
    try:
        relative = default.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return f"{default}/"
    return "./" if str(relative) == "." else f"{relative}/"


def _registry(
    tools: list[Path] | None,
    *,
    applications: Iterable[str] = (),
    resolve_installed: bool = True,
) -> Registry:
    """:func:`plandag.cli.options.build_registry`, exiting 2 with the reason when an entry
    of ``--tools`` cannot be loaded."""
    try:
        return build_registry(tools, applications=applications, resolve_installed=resolve_installed)
    except ToolLoadError as error:
        _fail(str(error))


_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _read_plan(path: Path, max_bytes: int) -> str:
    """The text of the plan file ``path``, read only when it is a regular file of at most
    ``max_bytes`` bytes; exits 2 with the reason otherwise.

    The file is opened without blocking (``O_NONBLOCK``: a FIFO would otherwise wait for a
    writer), its kind and size are taken from the open descriptor (``fstat``), and at most
    ``max_bytes + 1`` bytes are read, so neither a pipe nor a device (``/dev/zero``) nor a
    file that grows while it is read can hold the command or fill the memory.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        _fail(f"plan file {path} does not exist")
    except OSError as error:
        _fail(f"cannot read plan file {path}: {error.strerror or error}")
    try:
        status = os.fstat(descriptor)
        if stat.S_ISDIR(status.st_mode):
            _fail(f"plan file {path} is a folder; give the path of a plan file inside it")
        if not stat.S_ISREG(status.st_mode):
            kind = next((name for test, name in _FILE_KINDS if test(status.st_mode)), "special")
            _fail(
                f"plan file {path} is not a regular file ({kind}); save the plan in a file "
                "and give its path"
            )
        size, data = status.st_size, b""
        if size <= max_bytes:
            chunks: list[bytes] = []
            left = size + 1  # one byte more than stat said: a file that grew is seen
            while left > 0 and (chunk := os.read(descriptor, min(left, 1 << 20))):
                chunks.append(chunk)
                left -= len(chunk)
            data = b"".join(chunks)
            size = max(size, len(data))
    except OSError as error:
        _fail(f"cannot read plan file {path}: {error.strerror or error}")
    finally:
        os.close(descriptor)
    if size > max_bytes:
        _fail(
            f"plan file {path} has {size:,} bytes, more than the {max_bytes:,} a plan may "
            "have; raise --max-plan-bytes (max_plan_bytes in the config) if it is really a plan"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        _fail(f"cannot read plan file {path}: {error}")


def _parse_params(pairs: list[str] | None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            _fail(f"--param {pair!r} must look like NAME=VALUE")
        if name in params:
            _fail(f"--param {name} is given twice; give each param once")
        params[name] = value
    return params


def _text_folder(folder: Path, what: str) -> None:
    """Exit 2 when ``folder``'s path is not valid UTF-8: a run records it (the store, the
    plan's hash), and neither takes bytes that are not text."""
    if not _is_text(str(folder)):
        shown = os.fsencode(folder).decode("utf-8", "backslashreplace")
        _fail(
            f"{what} '{shown}' has a name that is not valid UTF-8; run from a folder whose "
            "path is UTF-8, or rename it"
        )


def _boundary(specs: list[str] | None, default: Path) -> WriteBoundary:
    if not specs:
        _text_folder(default, "the folder of the default write boundary,")
    try:
        return WriteBoundary.from_specs(specs or [default])
    except ValueError as error:
        _fail(f"--write-boundary: {error}")


def plan_factor(value: str | None, flag: str) -> float | str | None:
    """The value of ``--plan-cost-factor`` / ``--plan-time-factor``: a number > 0, the
    text ``none`` (lifts the limit), or None when the flag was not given."""
    if value is None or value.strip().lower() == "none":
        return value
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        _fail(f"{flag} {value!r}: give a number > 0 (times the plan's estimate), or none")
    return number


def slow_start_value(value: str | None) -> float | str | None:
    """The value of ``--slow-start``: a fraction in (0, 1], the text ``none`` (turns it
    off), or None when the flag was not given."""
    if value is None or value.strip().lower() == "none":
        return value
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and 0 < number <= 1):
        _fail(
            f"--slow-start {value!r}: give a fraction of the caps greater than 0 and at most 1 "
            "(e.g. 0.15), or none"
        )
    return number


def _limits(settings: Settings) -> RunLimits:
    from plandag.scheduler import RunLimits  # the runner: not for check, graph, tools

    slow_start = settings["slow_start"]
    if slow_start is not None and not 0 < slow_start <= 1:  # a file's value (the flag's is checked)
        _fail(
            f"slow_start = {slow_start:g} ({settings.sources['slow_start']}): give a fraction "
            'of the caps greater than 0 and at most 1, e.g. 0.15, or "none" to turn it off'
        )
    try:
        return RunLimits(
            max_seconds=settings["max_seconds"],
            max_cost_usd=settings["max_cost"],
            max_tokens=settings["max_tokens"],
            heartbeat_every=settings["heartbeat_every"],
            stall_after=settings["stall_after"],
            stop_on_stall=settings["stop_on_stall"],
            breaker_after=settings["breaker_after"] or None,
            plan_cost_factor=settings["plan_cost_factor"],
            plan_time_factor=settings["plan_time_factor"],
            slow_start=settings["slow_start"],
        )
    except ValueError as error:
        message = str(error)
        for name in ("stall_after", "max_seconds", "heartbeat_every"):
            message = message.replace(name, "--" + name.replace("_", "-"))
        _fail(message.replace("max_cost_usd", "--max-cost").replace("max_tokens", "--max-tokens"))


def _fraction(settings: Settings, name: str) -> float | None:
    """A setting that is a fraction from 0 to 1 (or None), checked: config files have no
    upper bound of their own."""
    value = settings[name]
    if value is not None and not 0 <= value <= 1:
        _fail(
            f"{name} = {value:g} ({settings.sources[name]}): give a fraction from 0 to 1, e.g. 0.25"
        )
    return value  # type: ignore[no-any-return]


def _planner_options(
    planner: str | None, model: str | None, base_url: str | None, save_repairs: Path | None
) -> str | None:
    """Check the ``--planner`` options; return the model name (None without --planner)."""
    from plandag.cli.plan_command import _KEY_VARIABLES, DEFAULT_MODELS

    if planner is None:
        given = [
            flag
            for flag, value in (
                ("--model", model),
                ("--base-url", base_url),
                ("--save-repairs", save_repairs),
            )
            if value is not None
        ]
        if given:
            _fail(f"{', '.join(given)} needs --planner anthropic|openai")
        return None
    if planner not in _KEY_VARIABLES:
        _fail(f"--planner {planner!r}: choose anthropic or openai")
    name = model or DEFAULT_MODELS.get(planner)
    if name is None:
        _fail(f"--model is required with --planner {planner}")
    if save_repairs is not None and save_repairs.exists() and not save_repairs.is_dir():
        _fail(f"--save-repairs {save_repairs} is not a folder")
    return name


def _planner_client(planner: str, base_url: str | None) -> LLMClient:
    """The planner's client; a missing key exits 2 here, before anything runs."""
    from plandag.cli.plan_command import _client

    return _client(planner, base_url)


def _tools_hint(error: PlanError, tools: list[Path] | None) -> None:
    if "unknown_tool" in error.codes and not tools:
        stderr.print("hint: tools of your own are loaded with --tools FILE.py", markup=False)


def _report_plan_error(
    source: str, error: PlanError, *, as_json: bool, tools: list[Path] | None
) -> NoReturn:
    if as_json:
        document = {
            "status": "invalid_plan",
            "diagnostics": [diagnostic.as_dict() for diagnostic in error.diagnostics],
        }
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
    else:
        for line in diagnostic_lines(source, error.diagnostics):
            stderr.print(line, markup=False)
        stderr.print(f"{source}: {error.error_count} error(s); the plan does not compile")
        _tools_hint(error, tools)
    raise typer.Exit(EXIT_USAGE)


# -- commands ------------------------------------------------------------------------------


@app.command()
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
        _fail(f"unknown schema {which!r}; choose plan or nfe")
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False) + "\n")


@app.command()
def check(
    plan_file: PlanArgument,
    tools: ToolsOption = None,
    param: ParamOption = None,
    read_only: ReadOnlyOption = False,
    write_boundary: BoundaryOption = None,
    http_allow: HttpAllowOption = None,
    max_steps: MaxStepsOption = None,
    max_plan_bytes: MaxPlanBytesOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compile a plan without running it; print every diagnostic like a compiler.

    With --param, param values are checked too (missing, unknown, wrong type). At most
    100 diagnostics are listed, then one that counts the rest. The plan's estimate of cost
    and time is printed from the tools' declared figures (exec and run also use the
    durations measured in the run store).
    """
    registry = _registry(tools)
    settings = _settings(
        {
            "write_boundary": write_boundary,
            "http_allow": http_allow,
            "max_steps": max_steps,
            "max_plan_bytes": max_plan_bytes,
        }
    )
    text = _read_plan(plan_file, settings["max_plan_bytes"])
    try:
        compiled = compile_plan(
            text,
            registry,
            params=_parse_params(param) if param else None,
            read_only=read_only,
            write_boundary=_boundary(settings["write_boundary"], Path.cwd()),
            http_allow=settings["http_allow"],
            max_steps=settings["max_steps"],
        )
    except PlanError as error:
        if as_json:
            document = [diagnostic.as_dict() for diagnostic in error.diagnostics]
            sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
            raise typer.Exit(EXIT_USAGE) from None
        _report_plan_error(str(plan_file), error, as_json=False, tools=tools)
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


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


@app.command()
def graph(
    plan_file: PlanArgument,
    tools: ToolsOption = None,
    max_steps: MaxStepsOption = None,
    max_plan_bytes: MaxPlanBytesOption = None,
) -> None:
    """Print the plan's DAG as Mermaid text, its critical path (by step count) marked, and
    the plan's estimate of cost and time (from the tools' declared figures)."""
    registry = _registry(tools)
    settings = _settings({"max_steps": max_steps, "max_plan_bytes": max_plan_bytes})
    text = _read_plan(plan_file, settings["max_plan_bytes"])
    try:
        compiled = compile_plan(text, registry, max_steps=settings["max_steps"])
    except PlanError as error:
        _report_plan_error(str(plan_file), error, as_json=False, tools=tools)
    path, length = critical_path(compiled.graph)
    labels = {}
    for step_id, compiled_step in compiled.steps.items():
        description = compiled_step.step.description
        labels[step_id] = f"{step_id}: {compiled_step.step.tool}" + (
            f" - {description}" if description else ""
        )
    sys.stdout.write(mermaid(compiled.graph, labels, highlight=path))
    route = " -> ".join(map(str, path)) or "none (empty plan)"
    sys.stdout.write(f"%% critical path: {route} ({_count(int(length), 'step')})\n")
    sys.stdout.write(f"%% {estimate_plan(compiled).describe()}\n")


@app.command("exec")
def exec_command(
    plan_file: PlanArgument,
    tools: ToolsOption = None,
    param: ParamOption = None,
    read_only: ReadOnlyOption = False,
    write_boundary: BoundaryOption = None,
    http_allow: HttpAllowOption = None,
    max_seconds: MaxSecondsOption = None,
    max_cost: MaxCostOption = None,
    max_tokens: MaxTokensOption = None,
    max_concurrency: MaxConcurrencyOption = None,
    max_steps: MaxStepsOption = None,
    max_plan_bytes: MaxPlanBytesOption = None,
    retries: RetriesOption = None,
    heartbeat: HeartbeatOption = None,
    heartbeat_every: HeartbeatEveryOption = None,
    stall_after: StallAfterOption = None,
    stop_on_stall: StopOnStallOption = None,
    breaker_after: BreakerAfterOption = None,
    max_blocked: MaxBlockedOption = None,
    total_replan_below: TotalReplanBelowOption = None,
    plan_cost_factor: PlanCostFactorOption = None,
    plan_time_factor: PlanTimeFactorOption = None,
    slow_start: SlowStartOption = None,
    as_json: JsonOption = False,
    planner: PlannerOption = None,
    provider: ProviderOption = None,
    model: ExecModelOption = None,
    base_url: ExecUrlOption = None,
    executor_model: ExecutorModelOption = None,
    save_repairs: SaveRepairsOption = None,
    store: StoreOption = None,
    approve: ApproveOption = None,
    redact: RedactOption = False,
    escalate: EscalateOption = None,
) -> None:
    """Compile and run a plan; print each step's outcome.

    Every run is recorded in the run store (--store, PLANDAG_STORE) with its trace; see
    `plandag runs`, `resume`, `trace`. A plan with effects needs approval (--approve ask,
    the default: asks on the terminal, or waits with exit 4 when there is none; auto:
    writes approved, irreversible effects still ask; never: saved awaiting_approval, exit 4).

    Defaults for every brake can live in [tool.plandag] of pyproject.toml or in
    plandag.toml (see `plandag config`); flags override them.

    With --planner, the plan still runs with no model call; a step that fails (after its
    retries) goes to the replanner with the completed results and the run's params (as
    quoted data), and its repair runs in the same run (at most 3 replans, 2 without
    progress; then the run is escalated to a person, exit 5, listed by `plandag inbox`;
    with --escalate never it ends gave_up, exit 1).

    A plan with llm or agent steps calls a model for those steps only: --provider (default
    anthropic, also when only --model or --base-url is given, as for `run`), --model and
    --base-url choose it as for `run`, --executor-model the model of
    steps that name none; the key is checked before anything runs (exit 2 without it).
    """
    settings = _settings(
        {
            "write_boundary": write_boundary,
            "http_allow": http_allow,
            "max_seconds": max_seconds,
            "max_cost": max_cost,
            "max_tokens": max_tokens,
            "max_concurrency": max_concurrency,
            "max_steps": max_steps,
            "max_plan_bytes": max_plan_bytes,
            "retries": retries,
            "heartbeat": str(heartbeat) if heartbeat is not None else None,
            "heartbeat_every": heartbeat_every,
            "stall_after": stall_after,
            "stop_on_stall": stop_on_stall,
            "breaker_after": breaker_after,
            "max_blocked": max_blocked,
            "total_replan_below": total_replan_below,
            "plan_cost_factor": plan_factor(plan_cost_factor, "--plan-cost-factor"),
            "plan_time_factor": plan_factor(plan_time_factor, "--plan-time-factor"),
            "slow_start": slow_start_value(slow_start),
            "approve": approve,
            "escalate": escalate,
            "executor_model": executor_model,
        }
    )
    if planner is None and provider is None and (model is not None or base_url is not None):
        provider = "anthropic"  # as `plandag run`: --model and --base-url default to anthropic
    if planner is None and provider is not None:
        model_name = _planner_options(None, None, None, save_repairs)  # --model is the run's
    else:
        model_name = _planner_options(planner, model, base_url, save_repairs)
    _text_folder(Path.cwd(), "the working folder")
    registry = _registry(tools)
    params = _parse_params(param)
    boundary = _boundary(settings["write_boundary"], Path.cwd())
    limits = _limits(settings)
    plan_text = _read_plan(plan_file, settings["max_plan_bytes"])
    print_brakes(settings, boundary_words(settings["write_boundary"], Path.cwd()))
    compile_started = time.time()
    try:
        compiled = compile_plan(
            plan_text,
            registry,
            params=params,
            read_only=read_only,
            write_boundary=boundary,
            http_allow=settings["http_allow"],
            max_steps=settings["max_steps"],
        )
    except PlanError as error:
        _report_plan_error(str(plan_file), error, as_json=as_json, tools=tools)
    compile_span = (compile_started, time.time())
    for line in diagnostic_lines(str(plan_file), list(compiled.diagnostics)):
        stderr.print(line, markup=False)
    executor = _executor_options(
        str(plan_file), compiled, planner, provider, model, base_url, settings["executor_model"]
    )
    progress, observers = _observers(compiled, settings)
    options = run_options(
        settings,
        limits,
        tools=tools,
        read_only=read_only,
        redact=redact,
        planner=(
            {"provider": planner, "model": model_name, "base_url": base_url}
            if planner is not None and model_name is not None
            else None
        ),
        executor=executor,
    )
    if planner is not None and model_name is not None:
        _exec_with_planner(
            plan_file,
            compiled,
            registry,
            settings,
            limits,
            planner=planner,
            model=model_name,
            base_url=base_url,
            save_repairs=save_repairs,
            as_json=as_json,
            options=options,
            store_path=store,
            compile_span=compile_span,
        )
    durable_exec(
        compiled,
        options,
        store_path=store,
        observers=observers,
        progress=progress,
        as_json=as_json,
        compile_span=compile_span,
        hooks=escalation_hooks(settings),
    )


def _executor_options(
    source: str,
    compiled: CompiledPlan,
    planner: str | None,
    provider: str | None,
    model: str | None,
    base_url: str | None,
    executor_model: str | None,
) -> dict[str, Any] | None:
    """The model of the plan's llm and agent steps, as stored with the run, or None when
    the plan has none; exit 2 (before anything runs) on a missing key or model."""
    from plandag.executors.access import executor_model_for, model_steps, require_key

    if planner is not None and provider is not None and planner != provider:
        _fail(
            f"--planner {planner} and --provider {provider}: the planner and the plan's model "
            "steps share one provider (and --model, --base-url); give one of them"
        )
    steps = model_steps(compiled.steps)
    if not steps:
        return None
    chosen = provider or planner or "anthropic"
    where = ", ".join(f"{step} ({compiled.steps[step].tool.name})" for step in steps)
    try:
        require_key(chosen, base_url)
        executor_model_for(chosen, model, executor_model)
    except InputError as error:
        _fail(f"{source}: steps {where} call a model: {error}")
    return {
        "provider": chosen,
        "model": model,
        "base_url": base_url,
        "executor_model": executor_model,
    }


def _observers(compiled: CompiledPlan, settings: Settings) -> tuple[StepProgress, list[Observer]]:
    progress = StepProgress(stderr, len(compiled.steps), enabled=stderr.is_terminal)
    observers: list[Observer] = [progress]
    if settings["heartbeat"]:
        heartbeat_file = Path(settings["heartbeat"])
        if not heartbeat_file.parent.is_dir():
            _fail(f"--heartbeat {heartbeat_file}: its folder does not exist")
        from plandag.scheduler import JsonlHeartbeatWriter

        observers.append(JsonlHeartbeatWriter(heartbeat_file))
    return progress, observers


def _exec_with_planner(
    plan_file: Path,
    compiled: CompiledPlan,
    registry: Registry,
    settings: Settings,
    limits: RunLimits,
    *,
    planner: str,
    model: str,
    base_url: str | None,
    save_repairs: Path | None,
    as_json: bool,
    options: Any,
    store_path: Path | None,
    compile_span: tuple[float, float],
) -> NoReturn:
    """``exec --planner``: run the stored plan in a session, repairing what fails; the
    run, its steps, decisions and repairs go to the run store and the trace, and a repair
    that adds steps with effects passes the same approval as the plan."""
    from plandag.brakes.retry import RetryPolicy
    from plandag.cli.agent_store import RepairGate
    from plandag.planner.repair import PlanRepairer, RepairedRun, run_with_repairs, save_repair

    progress, observers = _observers(compiled, settings)
    client = _planner_client(planner, base_url)  # a missing key stops here (exit 2)
    repairer = PlanRepairer(
        client,
        model,
        registry,
        max_blocked=settings["max_blocked"] or None,
        total_replan_below=_fraction(settings, "total_replan_below"),
    )
    params = dict(compiled.params)
    gate = RepairGate(
        store_path,
        compiled,
        options,
        compile_span=compile_span,
        hooks=escalation_hooks(settings),
    )

    def excerpt(session: Any, state: Any) -> Any:
        return {"params": params} if params else None

    async def work() -> RepairedRun | None:
        models = options.models() if options.executor is not None else None
        try:
            if not await gate.start():
                return None  # the plan itself awaits a decision or was rejected
            return await run_with_repairs(
                compiled,
                registry,
                repairer=repairer,
                excerpt=excerpt,
                limits=limits,
                retry=RetryPolicy(retries=settings["retries"]),
                observers=[*observers, *gate.observers],
                max_concurrency=settings["max_concurrency"],
                run_id=gate.run_id,
                on_session=gate.bind,
                approve_patch=gate.approve_patch,
                escalate=options.escalate,
                approve_plan=gate.approve_plan,
                tool_durations=gate.tool_durations(),
                models=models,
            )
        finally:
            await client.aclose()
            if models is not None:
                await models.client.aclose()

    try:
        with progress:
            outcome = Interruptible(work).run()
        if outcome.result is None and gate.outcome is not None:
            gate.close()
            from plandag.cli.store_command import report

            report(gate.outcome, as_json=as_json, store=gate.store)
        repaired = outcome.result
        if repaired is None:
            gate.finish(None)
            _fail("the run was interrupted before it could report", 130)
        gate.finish(repaired)
        if gate.outcome is not None and gate.outcome.message:
            stderr.print(gate.outcome.message, markup=False, highlight=False)
    finally:
        gate.close()
    saved: Path | None = None
    if save_repairs is not None and repaired.repaired:
        try:
            saved = save_repair(
                save_repairs, plan_file.stem, repaired, source=str(plan_file), model=model
            )
        except OSError as error:
            _fail(f"--save-repairs {save_repairs}: cannot write it ({error.strerror or error})")
    result = repaired.run
    if as_json:
        document = repaired.to_json_dict()
        document["saved_plan"] = str(saved) if saved is not None else None
        document = scrub_secrets(document)  # values under secret-named keys too
        sys.stdout.write(json.dumps(document, ensure_ascii=False, indent=2) + "\n")
    else:
        stdout.print(run_table(result, console_width=stdout.width, status=repaired.status))
        _print_progress(result)
        calls = len(repaired.llm_calls)
        cost = sum(record.cost_usd for record in repaired.llm_calls)
        if repaired.triggered:
            stderr.print(
                f"planner: {len(repaired.replans)} replan(s), {calls} model call(s), "
                f"${cost:.4f}" + (", a known repair reused" if repaired.reused else ""),
                markup=False,
            )
        if repaired.error is not None:
            stderr.print(f"error: {repaired.error.type}: {repaired.error.message}", markup=False)
        if repaired.status == "escalated":
            stderr.print(
                f"escalated ({result.escalation}) after {len(repaired.replans)} replan(s): "
                f"{result.escalation_detail}; no result was made up",
                markup=False,
            )
        elif repaired.gave_up is not None:
            stderr.print(
                f"gave up ({repaired.gave_up}) after {len(repaired.replans)} replan(s); no "
                "result was made up",
                markup=False,
            )
        if saved is not None:
            stderr.print(f"repaired plan written to {saved}", markup=False)
        if repaired.status == "succeeded" and result.output is not None:
            shown = scrub_secrets(to_jsonable(result.output))
            stdout.print_json(json.dumps(shown, ensure_ascii=False))
    if outcome.signal is not None:
        raise typer.Exit(exit_code_for_signal(outcome.signal))
    raise typer.Exit(EXIT_CODES.get(repaired.status, 1))


def _print_progress(result: RunResult) -> None:
    from plandag.brakes.budget import over_reservation_warning

    warning = over_reservation_warning(result.usage_over_reservation)
    if warning is not None:
        stderr.print(warning, markup=False, highlight=False)
    if result.status == "succeeded":
        return
    progress = result.progress()
    for label, key in (
        ("finished", "finished"),
        ("was running", "running"),
        ("never started", "not_started"),
    ):
        ids = progress.get(key) or []
        if ids and (key != "finished" or result.stop_reason):
            stderr.print(f"{label}: steps {', '.join(map(str, ids))}")
    if result.stop_reason:
        stderr.print(f"stopped: {result.stop_reason}")


@app.command("tools")
def list_tools(tools: ToolsOption = None, as_json: JsonOption = False) -> None:
    """List the registered tools and check kinds (built-in, NF-e, and --tools files).

    Every installed application's are listed (a planner is given only the built-ins, its
    job's and --tools').
    """
    registry = _registry(tools, applications=installed_applications())
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
        stdout.print(f"tool  {item.name}({arguments})  effects={item.effects}", markup=False)
        stdout.print(f"      {item.description}", markup=False)
    for definition in sorted(registry.checks.values(), key=lambda d: d.name):
        stdout.print(f"check {definition.name}", markup=False)
        stdout.print(f"      {definition.description}", markup=False)


@app.command("config")
def show_config(as_json: JsonOption = False) -> None:
    """Print the effective defaults of every brake and limit, and where each came from,
    then the default brakes of every job.

    Sources, lowest first: plandag's defaults (the brakes from the job's row below),
    [tool.plandag] in pyproject.toml, plandag.toml, then the command's own flags. A brake
    is lifted with "none" (--max-cost none; max_cost = "none" in a file).
    """
    settings = _settings({})
    jobs = {job: _settings({}, job) for job in JOB_BRAKES}
    if as_json:
        document: dict[str, Any] = {
            name: {"value": shown(value), "source": source}
            for name, value, source in settings.as_rows()
        }
        document["brakes"] = {
            job: {
                "per": JOB_BRAKES[job].per,
                "max_cost": shown(values["max_cost"]),
                "max_tokens": shown(values["max_tokens"]),
                "max_seconds": shown(values["max_seconds"]),
                "stall_after": shown(values["stall_after"]),
                "stop_on_stall": values["stop_on_stall"],
                "write_boundary": JOB_BRAKES[job].boundary,
            }
            for job, values in jobs.items()
        }
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    from rich.table import Table

    from plandag.brakes import describe_cost, describe_seconds, describe_tokens

    table = Table(title="plandag configuration", title_justify="left")
    table.add_column("setting", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_column("source", overflow="fold")
    for name, value, source in settings.as_rows():
        table.add_row(name, "-" if value is None else str(shown(value)), source)
    stdout.print(table)
    brakes = Table(title="brakes by job (on by default; lift with none)", title_justify="left")
    for column in ("job", "cost", "tokens", "wall clock", "stall", "write boundary"):
        brakes.add_column(column, no_wrap=column in ("job", "cost", "tokens"))
    for job, values in jobs.items():
        row = JOB_BRAKES[job]
        stall = describe_seconds(values["stall_after"])
        if not isinstance(values["stall_after"], type(UNLIMITED)):
            stall += " → stop" if values["stop_on_stall"] else " → report"
        brakes.add_row(
            job,
            describe_cost(values["max_cost"]) + f" per {row.per}",
            describe_tokens(values["max_tokens"]),
            describe_seconds(values["max_seconds"]),
            stall,
            row.boundary,
        )
    stdout.print(brakes)
    stdout.print(
        "python: run_plan(...) and Agent(...) without brake arguments get the python row; "
        "lift with UNLIMITED (from plandag import UNLIMITED).",
        markup=False,
        highlight=False,
    )


def main() -> None:
    """Entry point of the ``plandag`` console script (:func:`plandag.cli.commands.main`)."""
    from plandag.cli.commands import main as run

    run()
