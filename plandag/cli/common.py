"""What the commands share beyond their options: the consoles (secrets masked), the exit
codes, ``error:`` lines, the effective settings, the brakes line, the registry of
``--tools``, the plan file and params, the write boundary, the run's limits, and the
progress shown while a run runs.

Exit codes (ARCHITECTURE.md, "States and exit codes"): ``exec``, ``run`` and ``resume`` give
0 succeeded; 1 failed, gave_up or abandoned; 2 unusable arguments or a plan that does not
compile; 3 timed_out or budget_exceeded; 4 awaiting_approval or rejected; 5 escalated; 130
SIGINT; 143 SIGTERM (:data:`EXIT_CODES`).
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer

from plandag.brakes import JOB_BRAKES, brakes_line
from plandag.cli.display import StepProgress, diagnostic_lines
from plandag.cli.options import EXIT_USAGE, build_registry, mcp_servers
from plandag.cli.secret_output import SecretMaskingConsole
from plandag.config import Settings, load_settings
from plandag.errors import InputError, PlanError, ToolLoadError
from plandag.tools.boundary import WriteBoundary

if TYPE_CHECKING:
    from plandag.compiler import CompiledPlan
    from plandag.scheduler import RunLimits, RunResult
    from plandag.scheduler.events import Observer
    from plandag.scheduler.result import RunStatus
    from plandag.tools.registry import Registry

__all__ = [
    "EXIT_CODES",
    "EXIT_USAGE",
    "add_mcp_tools",
    "boundary_words",
    "brake_flags",
    "command_registry",
    "command_settings",
    "fail",
    "fraction_setting",
    "install_model_settings",
    "parse_params",
    "plan_factor",
    "print_brakes",
    "print_progress",
    "progress_observers",
    "read_plan_file",
    "report_plan_error",
    "require_text_folder",
    "run_limits_for",
    "slow_start_value",
    "stderr",
    "stdout",
    "write_boundary_for",
]

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
"""The exit code of each run state (ARCHITECTURE.md, "States and exit codes")."""

stdout = SecretMaskingConsole(soft_wrap=True, highlight=False)
stderr = SecretMaskingConsole(stderr=True, soft_wrap=True, highlight=False)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print ``error: message`` on standard error (red on a terminal) and exit with
    ``code`` (default 2)."""
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


def command_settings(flags: dict[str, Any], job: str = "exec") -> Settings:
    """The settings of a command: defaults, project files, then ``flags`` (each flag's
    text is valid UTF-8: :func:`plandag.cli.commands.refuse_words_not_utf8` saw it)."""
    try:
        settings = load_settings(job=job).with_flags(flags)
    except InputError as error:
        fail(str(error))
    install_model_settings(settings)
    return settings


def install_model_settings(settings: Settings) -> None:
    """Install the settings every model call of the process follows: the configuration's
    ``[prices]`` (:func:`plandag.models.pricing.configure_prices`) and the rate limit
    (``rpm``/``tpm``, :func:`plandag.models.ratelimit.configure_rate_limit`); exits 2 on a
    bad price entry or limit."""
    if not settings.prices and settings["rpm"] is None and settings["tpm"] is None:
        return  # nothing to install: the model layer is not even imported
    from plandag.models.pricing import configure_prices
    from plandag.models.ratelimit import RateLimit, configure_rate_limit

    try:
        configure_prices(settings.prices, settings.prices_source or "the configuration")
    except InputError as error:
        fail(str(error))
    try:
        limit = RateLimit(settings["rpm"], settings["tpm"])
    except ValueError as error:
        fail(f"--rpm/--tpm (or [rate_limit] in the configuration): {error}")
    configure_rate_limit(limit)


def print_brakes(
    settings: Settings,
    boundary: str,
    models: Iterable[tuple[str, str | None, str | None]] = (),
) -> None:
    """Print the run's brakes on stderr, one short line (:func:`plandag.brakes.brakes_line`),
    when a run starts: ``exec`` once its plan compiled, ``run``, ``research`` and
    ``extract`` before their first model call; with where the prices of ``models``
    (``(model, provider, base_url)`` of each model the run may call) come from, and the
    rate limit when one is set. ``plandag config`` shows how to lift each."""
    called = list(models)
    prices: str | None = None
    if called:
        from plandag.models.pricing import prices_source

        prices = prices_source(called)
    rate_limit: str | None = None
    if settings["rpm"] is not None or settings["tpm"] is not None:
        from plandag.models.ratelimit import RateLimit

        rate_limit = RateLimit(settings["rpm"], settings["tpm"]).describe() + " per provider"
    stderr.print(
        brakes_line(
            max_cost_usd=settings["max_cost"],
            max_tokens=settings["max_tokens"],
            max_seconds=settings["max_seconds"],
            stall_after=settings["stall_after"],
            stop_on_stall=settings["stop_on_stall"],
            boundary=boundary,
            per=JOB_BRAKES[settings.job].per,
            prices=prices,
            rate_limit=rate_limit,
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


def command_registry(
    tools: list[Path] | None,
    *,
    applications: Iterable[str] = (),
    resolve_installed: bool = True,
    withhold: Iterable[str] = (),
    mcp: Sequence[str] | None = None,
    servers: Sequence[Any] = (),
) -> Registry:
    """:func:`plandag.cli.options.build_registry`, exiting 2 with the reason when an entry
    of ``--tools`` cannot be loaded, or an MCP server cannot be started or is not trusted.

    Args:
        tools: the ``--tools`` entries.
        applications: installed applications to register.
        resolve_installed: as :func:`~plandag.cli.options.build_registry`.
        mcp: the ``--mcp`` flags of a command that takes them, as a list (``mcp or []``):
            the servers of the project's ``[[mcp]]`` tables start with them; None for a
            command that starts no MCP server of its own.
        servers: the MCP servers a stored run recorded (JSON specs): a resume starts them
            again, under the same names.
    """
    try:
        specs = (
            mcp_servers(mcp, servers, project=mcp is not None) if mcp is not None or servers else []
        )
        timeout = command_settings({})["mcp_timeout"] if specs else 60.0
        return build_registry(
            tools,
            applications=applications,
            resolve_installed=resolve_installed,
            withhold=withhold,
            mcp=specs,
            mcp_timeout=timeout,
        )
    except (ToolLoadError, InputError) as error:
        fail(str(error))


def add_mcp_tools(registry: Registry, mcp: Sequence[str]) -> list[str]:
    """Add to ``registry`` the tools of the MCP servers of the project's ``[[mcp]]`` tables
    (the file must be trusted) and of the ``--mcp`` flags ``mcp``, started for the
    command's length (:func:`plandag.cli.options.command_lifetime`), for a command whose
    registry is not :func:`command_registry`'s (``bench --tasks``); exits 2 with the reason
    when a server cannot be started, is not trusted, or a tool's name clashes.

    Returns:
        The names of the tools added, in order.
    """
    from plandag.cli.options import register_mcp_servers

    try:
        specs = mcp_servers(mcp)
        if not specs:
            return []
        return register_mcp_servers(registry, specs, command_settings({})["mcp_timeout"])
    except (ToolLoadError, InputError) as error:
        fail(str(error))


_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_plan_file(path: Path, max_bytes: int) -> str:
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
        fail(f"plan file {path} does not exist")
    except OSError as error:
        fail(f"cannot read plan file {path}: {error.strerror or error}")
    try:
        status = os.fstat(descriptor)
        if stat.S_ISDIR(status.st_mode):
            fail(f"plan file {path} is a folder; give the path of a plan file inside it")
        if not stat.S_ISREG(status.st_mode):
            kind = next((name for test, name in _FILE_KINDS if test(status.st_mode)), "special")
            fail(
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
        fail(f"cannot read plan file {path}: {error.strerror or error}")
    finally:
        os.close(descriptor)
    if size > max_bytes:
        fail(
            f"plan file {path} has {size:,} bytes, more than the {max_bytes:,} a plan may "
            "have; raise --max-plan-bytes (max_plan_bytes in the config) if it is really a plan"
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        fail(f"cannot read plan file {path}: {error}")


def parse_params(pairs: list[str] | None) -> dict[str, Any]:
    """``--param NAME=VALUE`` pairs as ``{NAME: VALUE}`` (text values); exits 2 for a pair
    without ``=`` or a name given twice."""
    params: dict[str, Any] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            fail(f"--param {pair!r} must look like NAME=VALUE")
        if name in params:
            fail(f"--param {name} is given twice; give each param once")
        params[name] = value
    return params


def require_text_folder(folder: Path, what: str) -> None:
    """Exit 2 when ``folder``'s path is not valid UTF-8: a run records it (the store, the
    plan's hash), and neither takes bytes that are not text."""
    if not _is_text(str(folder)):
        shown = os.fsencode(folder).decode("utf-8", "backslashreplace")
        fail(
            f"{what} '{shown}' has a name that is not valid UTF-8; run from a folder whose "
            "path is UTF-8, or rename it"
        )


def write_boundary_for(specs: list[str] | None, default: Path) -> WriteBoundary:
    """The run's write boundary: ``--write-boundary`` specs, else the folder ``default``;
    exits 2 on a spec that is not a folder, glob or URL host."""
    if not specs:
        require_text_folder(default, "the folder of the default write boundary,")
    try:
        return WriteBoundary.from_specs(specs or [default])
    except ValueError as error:
        fail(f"--write-boundary: {error}")


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
        fail(f"{flag} {value!r}: give a number > 0 (times the plan's estimate), or none")
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
        fail(
            f"--slow-start {value!r}: give a fraction of the caps greater than 0 and at most 1 "
            "(e.g. 0.15), or none"
        )
    return number


def brake_flags(
    *,
    max_seconds: Any = None,
    max_cost: Any = None,
    max_tokens: Any = None,
    rpm: float | None = None,
    tpm: float | None = None,
    max_concurrency: int | None = None,
    max_steps: int | None = None,
    max_plan_bytes: int | None = None,
    retries: int | None = None,
    heartbeat: Path | None = None,
    heartbeat_every: float | None = None,
    stall_after: Any = None,
    stop_on_stall: bool | None = None,
    breaker_after: int | None = None,
    max_blocked: int | None = None,
    total_replan_below: float | None = None,
    plan_cost_factor: str | None = None,
    plan_time_factor: str | None = None,
    slow_start: str | None = None,
) -> dict[str, Any]:
    """The flags of a command's brake options as :func:`command_settings` takes them
    (:meth:`plandag.config.Settings.with_flags`: a flag left None was not given, and a
    command passes only the options it has).

    ``--heartbeat`` becomes its path's text; ``--plan-cost-factor``,
    ``--plan-time-factor`` (:func:`plan_factor`) and ``--slow-start``
    (:func:`slow_start_value`) are read here, in that order: a bad value exits 2.

    Returns:
        The flags by setting name, in the order of the settings' brakes.
    """
    return {
        "max_seconds": max_seconds,
        "max_cost": max_cost,
        "max_tokens": max_tokens,
        "rpm": rpm,
        "tpm": tpm,
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
    }


def run_limits_for(settings: Settings) -> RunLimits:
    """The :class:`~plandag.scheduler.RunLimits` of the effective settings (the brakes,
    the heartbeat, the circuit breaker, the plan-relative factors, the slow start); exits
    2 naming the flag of a value out of range."""
    from plandag.scheduler import RunLimits  # the runner: not for check, graph, tools

    slow_start = settings["slow_start"]
    if slow_start is not None and not 0 < slow_start <= 1:  # a file's value (the flag's is checked)
        fail(
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
        fail(message.replace("max_cost_usd", "--max-cost").replace("max_tokens", "--max-tokens"))


def fraction_setting(settings: Settings, name: str) -> float | None:
    """A setting that is a fraction from 0 to 1 (or None), checked: config files have no
    upper bound of their own."""
    value = settings[name]
    if value is not None and not 0 <= value <= 1:
        fail(
            f"{name} = {value:g} ({settings.sources[name]}): give a fraction from 0 to 1, e.g. 0.25"
        )
    return value  # type: ignore[no-any-return]


def _tools_hint(error: PlanError, tools: list[Path] | None) -> None:
    if "unknown_tool" in error.codes and not tools:
        stderr.print("hint: tools of your own are loaded with --tools FILE.py", markup=False)


def report_plan_error(
    source: str, error: PlanError, *, as_json: bool, tools: list[Path] | None
) -> NoReturn:
    """Print a plan that does not compile (every diagnostic, like ``check``; ``--json``: a
    document with status ``invalid_plan``) and exit 2."""
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


def progress_observers(
    compiled: CompiledPlan, settings: Settings
) -> tuple[StepProgress, list[Observer]]:
    """The progress display of a run of ``compiled`` (on stderr, on a terminal only) and its
    observers: the display and the ``--heartbeat`` file's writer; exits 2 when the heartbeat
    file's folder does not exist."""
    progress = StepProgress(stderr, len(compiled.steps), enabled=stderr.is_terminal)
    # a bar that draws nothing (stderr is not a terminal) is not given the events
    observers: list[Observer] = [progress] if stderr.is_terminal else []
    if settings["heartbeat"]:
        heartbeat_file = Path(settings["heartbeat"])
        if not heartbeat_file.parent.is_dir():
            fail(f"--heartbeat {heartbeat_file}: its folder does not exist")
        from plandag.scheduler import JsonlHeartbeatWriter

        observers.append(JsonlHeartbeatWriter(heartbeat_file))
    return progress, observers


def print_progress(result: RunResult) -> None:
    """On stderr after a run's table: a warning when a provider reported more than its calls
    reserved, and for a run that did not succeed, which steps finished, were running and
    never started, and why it stopped."""
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
