"""Run settings: defaults, project files and command-line flags, with where each came from.

Precedence, lowest first (docs/reference/cli.md, docs/brakes.md):

1. plandag's own defaults;
2. ``[tool.plandag]`` in the nearest ``pyproject.toml`` (the working directory or a parent);
3. ``plandag.toml`` in the same search (its top-level keys, or a ``[plandag]`` table);
4. command-line flags.

The same files list the MCP servers a command starts (``[[mcp]]`` tables:
:func:`load_mcp_config`, :class:`McpServerSpec`); they start only once the person trusts the
file (:mod:`plandag.trust`).

``plandag config`` prints the effective values and the source of each. Keys use the flags'
names with ``_`` or ``-`` (``max_seconds`` or ``max-seconds``). An unknown key or a value of
the wrong type is an error naming the file, the key and what is expected.

The brakes (``max_cost``, ``max_tokens``, ``max_seconds``, ``stall_after``,
``stop_on_stall``) default to the job's row of :data:`plandag.brakes.JOB_BRAKES`
(:func:`load_settings`'s ``job``); a file's value replaces the default of every job. A brake
is lifted with the string ``"none"`` (``max_cost = "none"``), as ``--max-cost none`` does on
the command line; it is then :data:`~plandag.brakes.UNLIMITED` in :class:`Settings`.
``false`` or ``0`` do not lift anything (``false`` is refused, ``0`` is a cap of zero).

Two tables sit beside the settings in the same files: ``[prices]`` (model name → ``input``,
``output``, ``cache_read``, ``cache_write``, US dollars per million tokens; the entries of
both files are merged, ``plandag.toml``'s winning per model: :attr:`Settings.prices`,
checked and installed by :func:`plandag.models.pricing.configure_prices`) and
``[rate_limit]`` (``rpm`` and ``tpm``, the settings of the same names: requests and tokens
per minute to each model provider, off by default; :mod:`plandag.models.ratelimit`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import shlex
import tomllib
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from plandag.brakes import DEFAULT_PLANNER_MAX_TOKENS, JOB_BRAKES, LIFT, UNLIMITED, Unlimited
from plandag.dag.limits import DEFAULT_MAX_PLAN_BYTES, DEFAULT_MAX_STEPS
from plandag.errors import InputError

__all__ = [
    "BRAKE_SETTINGS",
    "MCP_KEY",
    "SETTINGS",
    "McpConfig",
    "McpServerSpec",
    "McpToolPolicy",
    "Setting",
    "Settings",
    "load_mcp_config",
    "load_settings",
    "mcp_server_spec",
    "parse_mcp_flag",
    "shown",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Setting:
    """One configurable value: its name, type, default, unit and meaning.

    Attributes:
        name: the key in files (``_`` or ``-``) and, with ``--``, the flag.
        kind: ``int``, ``float``, ``bool`` or ``str`` (an int is accepted for a float).
        default: plandag's own default (None: off).
        help: what it means, with its unit.
        repeated: a list of values (a single string in a file is a list of one).
        minimum: the smallest value accepted for a number (the flag's own ``min``).
        strict: the value must be greater than ``minimum``, not equal to it.
        nullable: the text ``none`` (any case), in a file or as the flag's value, lifts
            the setting (its value is then None).
        liftable: the string ``"none"`` lifts it (:data:`~plandag.brakes.UNLIMITED`).
    """

    name: str
    kind: type
    default: Any
    help: str
    repeated: bool = False
    minimum: float | None = None
    strict: bool = False
    nullable: bool = False
    liftable: bool = False


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "max_seconds",
        float,
        JOB_BRAKES["exec"].max_seconds,
        'wall-clock cap for a run, seconds from its start ("none" lifts it)',
        minimum=0.0,
        strict=True,
        liftable=True,
    ),
    Setting(
        "max_cost",
        float,
        JOB_BRAKES["exec"].max_cost_usd,
        'cost cap per run (per batch for extract), US dollars, priced models only ("none" '
        "lifts it)",
        minimum=0.0,
        liftable=True,
    ),
    Setting(
        "max_tokens",
        int,
        JOB_BRAKES["exec"].max_tokens,
        'token cap per run (per batch for extract), every model ("none" lifts it)',
        minimum=0,
        liftable=True,
    ),
    Setting("max_concurrency", int, None, "steps at once across a run", minimum=1),
    Setting(
        "max_steps",
        int,
        DEFAULT_MAX_STEPS,
        "the most steps a plan may have (with a run's replans, all its steps together)",
        minimum=1,
    ),
    Setting(
        "max_plan_bytes",
        int,
        DEFAULT_MAX_PLAN_BYTES,
        "the largest plan file check, graph and exec read, in bytes (a plan file must be a "
        "regular file: not a pipe, a device or a folder)",
        minimum=1,
    ),
    Setting("retries", int, 2, "retries of a failed step after its first attempt", minimum=0),
    Setting(
        "write_boundary",
        str,
        None,
        "where a run may write: folders, path globs, URL hosts (default: the working "
        "directory for exec, the output's folder for extract)",
        repeated=True,
    ),
    Setting(
        "http_allow",
        str,
        None,
        "hosts HTTP tools and hooks may reach: globs of host names (api.example.com, "
        "*.example.org, 127.0.0.1:8080); hosts an approved plan lists are added to them",
        repeated=True,
    ),
    Setting("heartbeat", str, None, "JSON Lines file that receives heartbeat events"),
    Setting("heartbeat_every", float, 10.0, "seconds between heartbeats", minimum=0.0, strict=True),
    Setting(
        "stall_after",
        float,
        JOB_BRAKES["exec"].stall_after,
        'seconds without a finished step that make a stall ("none": no stall detection)',
        minimum=0.0,
        strict=True,
        liftable=True,
    ),
    Setting(
        "stop_on_stall",
        bool,
        JOB_BRAKES["exec"].stop_on_stall,
        "stop the run at the first stall (false: report stalls only)",
    ),
    Setting(
        "planner_max_tokens",
        int,
        DEFAULT_PLANNER_MAX_TOKENS,
        "output tokens a planning call may take (reserved against the caps before it is "
        "sent; 4096 is three times the largest plan measured, see plandag.brakes)",
        minimum=1,
    ),
    Setting(
        "executor_model",
        str,
        None,
        "model of llm and agent steps that name none (default: claude-haiku-4-5 with the "
        "anthropic provider, the run's --model with an OpenAI-compatible server)",
    ),
    Setting(
        "breaker_after",
        int,
        3,
        "steps in a row of one tool or HTTP host that fail (after their retries) before it "
        "is down for the run and steps needing it fail at once; 0: no circuit breaker",
        minimum=0,
    ),
    Setting(
        "max_blocked",
        int,
        3,
        "failures of one intent (tool and arguments, or step description) across replans "
        "before the run stops replanning it and escalates; 0: never",
        minimum=0,
    ),
    Setting(
        "total_replan_below",
        float,
        None,
        "fraction of the steps completed (0 to 1) under which a replan plans again from the "
        "goal (total) instead of replacing the failed part (partial); off by default",
        minimum=0.0,
    ),
    Setting(
        "plan_cost_factor",
        float,
        2.0,
        "a run that spends more than this many times its plan's estimated cost stops and "
        "escalates (none: no plan-relative cost limit)",
        minimum=0.0,
        strict=True,
        nullable=True,
    ),
    Setting(
        "plan_time_factor",
        float,
        3.0,
        "a run that takes more than this many times its plan's estimated time (never below "
        "5 s; time waiting for a person or for rate-limit slots left out) stops and "
        "escalates (none: no limit)",
        minimum=0.0,
        strict=True,
        nullable=True,
    ),
    Setting(
        "slow_start",
        float,
        0.15,
        "until a first model call has settled, the calls in flight may reserve only this "
        "fraction of the cost and token caps, at most 1 (none: no slow start)",
        minimum=0.0,
        strict=True,
        nullable=True,
    ),
    Setting(
        "rpm",
        float,
        None,
        "requests per minute to each model provider, shared by every model call of the "
        "process (a batch's worker processes split it evenly); off by default ([rate_limit] "
        "in a file)",
        minimum=0.0,
        strict=True,
        nullable=True,
    ),
    Setting(
        "tpm",
        float,
        None,
        "tokens per minute to each model provider (each call's prompt estimate plus its "
        "max_tokens, settled with the usage reported), shared like rpm; off by default "
        "([rate_limit] in a file)",
        minimum=0.0,
        strict=True,
        nullable=True,
    ),
    Setting(
        "mcp_timeout",
        float,
        60.0,
        "seconds a call to an MCP server's tool may take (a [[mcp]] table's own timeout, or "
        "a tool's, wins)",
        minimum=0.0,
        strict=True,
    ),
    Setting("jobs", int, 4, "documents at once for extract", minimum=1),
    Setting(
        "workers",
        int,
        None,
        "worker processes for extract (default: the machine's cores; 1: in the command's "
        "own process)",
        minimum=1,
    ),
    Setting(
        "approve",
        str,
        "ask",
        "plans with effects: ask a person, auto (writes approved, irreversible effects ask) "
        "or never (saved awaiting_approval, exit 4)",
    ),
    Setting(
        "approval_expiry",
        float,
        86400.0,
        "seconds a pending approval stays valid (24 hours)",
        minimum=0.0,
        strict=True,
    ),
    Setting(
        "escalate",
        str,
        "person",
        "a run that cannot go on by itself (replan caps, no valid replan, an unknown "
        "irreversible outcome...): person (escalated, exit 5, listed by `plandag inbox`) "
        "or never (gave_up, exit 1)",
    ),
    Setting(
        "escalation_command",
        str,
        None,
        "a command run when a run escalates, with the case as JSON on its stdin (split "
        "like a shell line; no shell runs it)",
    ),
    Setting(
        "escalation_url",
        str,
        None,
        "a URL that receives the case of each escalated run as a JSON POST (its host must "
        "be allowed by http_allow)",
    ),
    Setting(
        "escalation_timeout",
        float,
        10.0,
        "seconds the escalation command or POST may take",
        minimum=0.0,
        strict=True,
    ),
)
_BY_NAME = {setting.name: setting for setting in SETTINGS}
BRAKE_SETTINGS: dict[str, str] = {
    "max_cost": "max_cost_usd",
    "max_tokens": "max_tokens",
    "max_seconds": "max_seconds",
    "stall_after": "stall_after",
    "stop_on_stall": "stop_on_stall",
}
"""Settings that are brakes: setting name → field of :class:`plandag.brakes.JobBrakes`."""
_CHOICES: dict[str, tuple[str, ...]] = {
    "approve": ("ask", "auto", "never"),
    "escalate": ("person", "never"),
}
"""Settings whose text is one of a few words (the flag's own choices)."""
_KIND_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


@dataclasses.dataclass
class Settings:
    """Effective settings: ``values[name]`` and ``sources[name]`` (``default``, a file, or
    ``--flag``); ``job``: whose brakes the defaults are. A lifted brake's value is
    :data:`~plandag.brakes.UNLIMITED`."""

    values: dict[str, Any]
    sources: dict[str, str]
    job: str = "exec"
    prices: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The ``[prices]`` tables of the project's files, merged (model name → prices)."""
    prices_source: str = ""
    """The file(s) ``prices`` came from, for messages."""

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def with_flags(self, flags: Mapping[str, Any]) -> Settings:
        """A copy where every flag given on the command line (not None) wins.

        Raises:
            InputError: an ``--http-allow`` pattern can never match a host
                (:func:`plandag.allowlist.pattern_problem`).
        """
        values, sources = dict(self.values), dict(self.sources)
        for name, value in flags.items():
            if name not in _BY_NAME:
                raise KeyError(name)
            if value is None or (_BY_NAME[name].repeated and not value):
                continue
            values[name] = _lifted(_BY_NAME[name], value)
            sources[name] = "--" + name.replace("_", "-")
            if name == "http_allow" and isinstance(values[name], list):
                _check_hosts(values[name], sources[name])
        return Settings(values, sources, self.job, self.prices, self.prices_source)

    def as_rows(self) -> list[tuple[str, Any, str]]:
        """``(name, value, source)`` for every setting, in declaration order."""
        return [(s.name, self.values[s.name], self.sources[s.name]) for s in SETTINGS]


def _in_range(setting: Setting, number: float, where: str) -> None:
    minimum = setting.minimum
    if math.isfinite(number) and (
        minimum is None or number > minimum or (number == minimum and not setting.strict)
    ):
        return
    bound = "" if minimum is None else f" {'>' if setting.strict else '>='} {minimum:g}"
    raise InputError(f"{where}: {setting.name} must be a finite number{bound}, got {number!r}")


def _lifted(setting: Setting, value: Any) -> Any:
    """None for the text ``none`` of a nullable setting, else ``value``."""
    if setting.nullable and isinstance(value, str) and value.strip().lower() == "none":
        return None
    return value


def _coerce(setting: Setting, value: Any, where: str) -> Any:
    if _lifted(setting, value) is None:
        return None

    def one(item: Any) -> Any:
        kind = setting.kind
        if setting.liftable and isinstance(item, str) and item.strip().lower() == LIFT:
            return UNLIMITED
        if kind is bool:
            if isinstance(item, bool):
                return item
        elif kind is int:
            if isinstance(item, int) and not isinstance(item, bool):
                _in_range(setting, item, where)
                return item
        elif kind is float:
            if isinstance(item, int | float) and not isinstance(item, bool):
                _in_range(setting, item, where)
                return float(item)
        elif isinstance(item, str):
            choices = _CHOICES.get(setting.name)
            if choices is None or item in choices:
                return item
            shown = ", ".join(choices[:-1]) + " or " + choices[-1]
            raise InputError(
                f"{where}: {setting.name} must be {shown}, got {item!r}; "
                "see `plandag config` for every setting"
            )
        lift = ' or "none" to lift it' if setting.liftable else ""
        raise InputError(
            f"{where}: {setting.name} must be {_KIND_NAMES[kind]}{lift}, got {item!r}; "
            f"see `plandag config` for every setting"
        )

    if setting.repeated:
        items = value if isinstance(value, list) else [value]
        coerced = [one(item) for item in items]
        if setting.name == "http_allow":
            _check_hosts(coerced, where)
        return coerced
    return one(value)


def _check_hosts(patterns: Sequence[Any], where: str) -> None:
    """Refuse an ``http_allow`` pattern that can never match a host (InputError)."""
    from plandag.allowlist import pattern_refusal

    for pattern in patterns:
        refusal = pattern_refusal(pattern, where) if isinstance(pattern, str) else None
        if refusal is not None:
            raise InputError(refusal)


PRICES_KEY = "prices"
RATE_LIMIT_KEY = "rate_limit"
_RATE_LIMIT_SETTINGS = ("rpm", "tpm")


def _flattened(table: Mapping[str, Any], where: str) -> list[tuple[str, Any]]:
    """The table's settings as ``(key, value)``, those of its ``[rate_limit]`` table
    included; ``[prices]`` left out (read apart)."""
    items: list[tuple[str, Any]] = []
    for raw_key, value in table.items():
        if raw_key == PRICES_KEY:
            continue
        if raw_key.replace("-", "_") == RATE_LIMIT_KEY:
            if not isinstance(value, Mapping):
                raise InputError(f"{where}: rate_limit must be a table ([rate_limit])")
            for inner, limit in value.items():
                if inner.replace("-", "_") not in _RATE_LIMIT_SETTINGS:
                    raise InputError(
                        f"{where} [rate_limit]: unknown key {inner!r}; the keys are rpm "
                        "(requests per minute) and tpm (tokens per minute)"
                    )
                items.append((inner, limit))
            continue
        items.append((raw_key, value))
    return items


def _read_table(path: Path, table: Mapping[str, Any], label: str) -> dict[str, Any]:
    where = f"{path} {label}" if label else str(path)
    values: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for raw_key, value in _flattened(table, where):
        if raw_key == MCP_KEY:  # the MCP servers: load_mcp_config reads them
            continue
        key = raw_key.replace("-", "_")
        setting = _BY_NAME.get(key)
        if setting is None:
            nearest = difflib.get_close_matches(key, list(_BY_NAME), n=1)
            hint = f"; did you mean {nearest[0]}?" if nearest else ""
            raise InputError(f"{where}: unknown setting {raw_key!r}{hint}")
        if key in spelled:
            raise InputError(
                f"{where}: {setting.name} is given twice ({spelled[key]!r} and {raw_key!r}); "
                "keep one"
            )
        spelled[key] = raw_key
        values[key] = _coerce(setting, value, where)
    return values


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise InputError(f"{path}: not valid TOML ({error}); fix or remove the file") from error
    except OSError as error:
        raise InputError(f"{path}: cannot read it ({error})") from error


def _nearest(start: Path, name: str) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / name
        if candidate.is_file():
            return candidate
    return None


def load_settings(start: Path | None = None, *, job: str = "exec") -> Settings:
    """The defaults overlaid by the project's files found from ``start`` upwards.

    Args:
        start: the folder to search from (default: the working directory).
        job: whose default brakes apply (a key of :data:`plandag.brakes.JOB_BRAKES`:
            ``exec``, ``run``, ``extract nfe``...).

    Returns:
        The effective settings before command-line flags (add them with
        :meth:`Settings.with_flags`).

    Raises:
        InputError: a file is not valid TOML, holds an unknown key (the nearest valid
            name is suggested), a value of the wrong type, or an ``http_allow`` pattern
            that can never match a host.
    """
    folder = (start or Path.cwd()).resolve()
    values = {setting.name: setting.default for setting in SETTINGS}
    row = JOB_BRAKES[job]
    for name, field in BRAKE_SETTINGS.items():
        values[name] = getattr(row, field)
    sources = {setting.name: "default" for setting in SETTINGS}
    prices: dict[str, Any] = {}
    price_files: list[str] = []
    for path, table, label in _project_tables(folder):
        where = f"{path} {label}" if label else str(path)
        for key, value in _read_table(path, table, label).items():
            values[key], sources[key] = value, where
        _collect_prices(prices, price_files, table, where)
    return Settings(values, sources, job, prices, " and ".join(price_files))


def _project_tables(folder: Path) -> list[tuple[Path, Mapping[str, Any], str]]:
    """The project's settings tables found from ``folder`` upwards, lowest precedence
    first: ``(file, table, label)`` of ``[tool.plandag]`` in the nearest ``pyproject.toml``,
    then of the nearest ``plandag.toml`` (its ``[plandag]`` table or its top level).

    Raises:
        InputError: a file is not valid TOML, or its plandag table is not a table.
    """
    found: list[tuple[Path, Mapping[str, Any], str]] = []
    pyproject = _nearest(folder, "pyproject.toml")
    if pyproject is not None:
        tool_table = _load_toml(pyproject).get("tool")
        table = tool_table.get("plandag") if isinstance(tool_table, Mapping) else None
        if table is not None:
            if not isinstance(table, Mapping):
                raise InputError(f"{pyproject}: tool.plandag must be a table ([tool.plandag])")
            found.append((pyproject, table, "[tool.plandag]"))
    own = _nearest(folder, "plandag.toml")
    if own is not None:
        document = _load_toml(own)
        table = document
        if "plandag" in document:
            table = document["plandag"]
            if not isinstance(table, Mapping):
                raise InputError(f"{own}: plandag must be a table ([plandag])")
            outside = [key for key in document if key != "plandag"]
            if outside:
                raise InputError(
                    f"{own}: {', '.join(map(repr, outside))} outside the [plandag] table; "
                    "put every setting in [plandag] or every one at the top level"
                )
        found.append((own, table, ""))
    return found


def _collect_prices(
    prices: dict[str, Any], files: list[str], table: Mapping[str, Any], where: str
) -> None:
    """Merge the ``[prices]`` of ``table`` into ``prices`` (its entries win per model)."""
    found = table.get(PRICES_KEY)
    if found is None:
        return
    if not isinstance(found, Mapping):
        raise InputError(
            f'{where}: prices must be a table ([prices."MODEL"] with input and output in US '
            "dollars per million tokens)"
        )
    prices.update(found)
    files.append(where)


def shown(value: Any) -> Any:
    """A setting's value for display and JSON: a lifted brake is ``"none"``."""
    return LIFT if isinstance(value, Unlimited) else value


# -- MCP servers ([[mcp]] tables) ------------------------------------------------------------

MCP_KEY = "mcp"
"""The key of the MCP server tables in a project file: ``[[mcp]]`` in ``plandag.toml``
(``[[plandag.mcp]]`` under a ``[plandag]`` table), ``[[tool.plandag.mcp]]`` in
``pyproject.toml``."""

MCP_EFFECTS = ("none", "write", "irreversible")
DEFAULT_MCP_STARTUP_TIMEOUT = 30.0
"""Seconds an MCP server may take to start and list its tools."""
DEFAULT_MCP_CHECK_TIMEOUT = 5.0
"""Seconds an MCP server has to answer a listing of its tools after one of its calls ran past
its timeout; a server that does not is hung, and down for the rest of the run."""

_SERVER_KEYS = (
    "name",
    "command",
    "args",
    "url",
    "env",
    "timeout",
    "startup_timeout",
    "trust_annotations",
    "tools",
)
_TOOL_KEYS = ("effects", "egress", "taint_source", "idempotent", "timeout")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


@dataclasses.dataclass(frozen=True, slots=True)
class McpToolPolicy:
    """What a person declares about one tool of an MCP server (``[mcp.tools.NAME]``); a
    field left None keeps what the tool would count as without it (the safe default, or
    the server's annotations when the server's ``trust_annotations`` is true).

    Attributes:
        effects: ``none``, ``write`` or ``irreversible``.
        egress: the tool sends data out of the machine.
        taint_source: its results bring outside content in (tainted).
        idempotent: repeating a call is harmless (retries after an unknown outcome).
        timeout: seconds one call may take.
    """

    effects: str | None = None
    egress: bool | None = None
    taint_source: bool | None = None
    idempotent: bool | None = None
    timeout: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The declared fields (None left out)."""
        return {key: value for key, value in dataclasses.asdict(self).items() if value is not None}


@dataclasses.dataclass(frozen=True, slots=True)
class McpServerSpec:
    """One MCP server a command starts: ``--mcp`` on the command line, or a ``[[mcp]]``
    table of a project file (:func:`load_mcp_config`).

    Attributes:
        name: the prefix of its tools' names (``NAME_TOOL``), or None for the name the
            server gives itself (``serverInfo.name``).
        command: the program and its arguments of a server over stdio (no shell), or ()
            for a server over streamable HTTP.
        url: the streamable HTTP endpoint, or None for a server over stdio.
        env: names of environment variables passed on to a stdio server (it is given
            only a few basic ones otherwise: ``HOME``, ``PATH``, ``USER``...); the values
            are read when it starts, never stored.
        cwd: the folder a stdio server starts in (relative paths of ``command`` mean what
            they mean there): the project file's folder, or the working folder for
            ``--mcp``.
        timeout: seconds one call may take (None: the ``mcp_timeout`` setting, 60 s).
        startup_timeout: seconds the server may take to start and list its tools.
        trust_annotations: the server's annotations (``readOnlyHint``,
            ``destructiveHint``, ``idempotentHint``, ``openWorldHint``) narrow what its
            tools count as; without it they are ignored.
        tools: what the person declares per tool, by the tool's name on the server.
        source: where it was given: ``--mcp`` or the project file's path.
    """

    name: str | None = None
    command: tuple[str, ...] = ()
    url: str | None = None
    env: tuple[str, ...] = ()
    cwd: str | None = None
    timeout: float | None = None
    startup_timeout: float = DEFAULT_MCP_STARTUP_TIMEOUT
    trust_annotations: bool = False
    tools: Mapping[str, McpToolPolicy] = dataclasses.field(default_factory=dict)
    source: str = "--mcp"

    def describe(self) -> str:
        """``stdio: python server.py`` or ``http: http://127.0.0.1:8000/mcp``."""
        if self.url is not None:
            return f"http: {self.url}"
        return "stdio: " + shlex.join(self.command)

    def as_json(self) -> dict[str, Any]:
        """The spec as stored with a run (a resume starts the same server again)."""
        return {
            "name": self.name,
            "command": list(self.command),
            "url": self.url,
            "env": list(self.env),
            "cwd": self.cwd,
            "timeout": self.timeout,
            "startup_timeout": self.startup_timeout,
            "trust_annotations": self.trust_annotations,
            "tools": {name: policy.as_json() for name, policy in self.tools.items()},
            "source": self.source,
        }

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> McpServerSpec:
        """A spec from :meth:`as_json`."""
        return cls(
            name=document.get("name"),
            command=tuple(document.get("command") or ()),
            url=document.get("url"),
            env=tuple(document.get("env") or ()),
            cwd=document.get("cwd"),
            timeout=document.get("timeout"),
            startup_timeout=float(document.get("startup_timeout", DEFAULT_MCP_STARTUP_TIMEOUT)),
            trust_annotations=bool(document.get("trust_annotations", False)),
            tools={
                name: McpToolPolicy(**policy)
                for name, policy in (document.get("tools") or {}).items()
            },
            source=str(document.get("source", "--mcp")),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class McpConfig:
    """The MCP servers of a project file.

    Attributes:
        path: the file (``plandag.toml`` or ``pyproject.toml``), resolved.
        servers: its ``[[mcp]]`` tables, in order.
    """

    path: Path
    servers: tuple[McpServerSpec, ...]


def _seconds(value: Any, where: str, key: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise InputError(f"{where}: {key} must be a number of seconds > 0, got {value!r}")
    return float(value)


def _unknown(where: str, key: str, known: Sequence[str], what: str) -> InputError:
    nearest = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {nearest[0]}?" if nearest else f" (known: {', '.join(known)})"
    return InputError(f"{where}: unknown {what} key {key!r}{hint}")


def _tool_policy(value: Any, where: str) -> McpToolPolicy:
    if not isinstance(value, Mapping):
        raise InputError(f"{where}: must be a table of effects, egress, taint_source, ...")
    fields: dict[str, Any] = {}
    for raw_key, item in value.items():
        key = str(raw_key).replace("-", "_")
        if key not in _TOOL_KEYS:
            raise _unknown(where, str(raw_key), _TOOL_KEYS, "tool")
        if key == "effects":
            if item not in MCP_EFFECTS:
                raise InputError(
                    f"{where}: effects must be none, write or irreversible, got {item!r}"
                )
            fields[key] = item
        elif key == "timeout":
            fields[key] = _seconds(item, where, key)
        else:
            if not isinstance(item, bool):
                raise InputError(f"{where}: {key} must be true or false, got {item!r}")
            fields[key] = item
    return McpToolPolicy(**fields)


def mcp_server_spec(
    table: Mapping[str, Any], where: str, *, folder: Path, source: str
) -> McpServerSpec:
    """A server spec from one ``[[mcp]]`` table.

    Keys (``_`` or ``-``): ``name``; ``command`` (a string split like a shell line, or a
    list of words) with optional ``args`` (a list appended to it), or ``url`` (an
    ``http://`` or ``https://`` streamable HTTP endpoint); ``env`` (names of environment
    variables passed on); ``timeout`` and ``startup_timeout`` (seconds);
    ``trust_annotations`` (true or false); ``tools`` (a table per tool name of ``effects``,
    ``egress``, ``taint_source``, ``idempotent``, ``timeout``).

    Args:
        table: the table.
        where: its place for messages (``plandag.toml [[mcp]] #2``).
        folder: the folder a stdio server starts in.
        source: what :attr:`McpServerSpec.source` records.

    Raises:
        InputError: an unknown key, a value of the wrong type, neither or both of
            ``command`` and ``url``.
    """
    if not isinstance(table, Mapping):
        raise InputError(f"{where}: each mcp entry must be a table ([[mcp]])")
    values: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = str(raw_key).replace("-", "_")
        if key not in _SERVER_KEYS:
            raise _unknown(where, str(raw_key), _SERVER_KEYS, "[[mcp]]")
        if key in values:
            raise InputError(f"{where}: {key} is given twice; keep one")
        values[key] = value
    name = values.get("name")
    if name is not None and (not isinstance(name, str) or not _NAME.fullmatch(name)):
        raise InputError(
            f"{where}: name must be a word of letters, digits, '_', '-' or '.' (at most 64), "
            f"got {name!r}"
        )
    command: list[str] = []
    raw_command = values.get("command")
    if isinstance(raw_command, str):
        try:
            command = shlex.split(raw_command)
        except ValueError as error:
            raise InputError(
                f"{where}: command {raw_command!r} cannot be split: {error}"
            ) from error
    elif isinstance(raw_command, list) and all(isinstance(word, str) for word in raw_command):
        command = list(raw_command)
    elif raw_command is not None:
        raise InputError(f"{where}: command must be a string or a list of strings")
    arguments = values.get("args", [])
    if not isinstance(arguments, list) or not all(isinstance(word, str) for word in arguments):
        raise InputError(f"{where}: args must be a list of strings")
    command += arguments
    url = values.get("url")
    if url is not None and (not isinstance(url, str) or not _is_http_url(url)):
        raise InputError(f"{where}: url must be an http:// or https:// URL, got {url!r}")
    if bool(command) == (url is not None):
        raise InputError(
            f"{where}: give either command (a server over stdio) or url (a server over "
            "streamable HTTP)"
        )
    if arguments and url is not None:
        raise InputError(f"{where}: args goes with command, not with url")
    env = values.get("env", [])
    if not isinstance(env, list) or not all(
        isinstance(item, str) and item.isidentifier() for item in env
    ):
        raise InputError(
            f"{where}: env must be a list of environment variable names (their values are "
            "read when the server starts, never written in the file)"
        )
    trust_annotations = values.get("trust_annotations", False)
    if not isinstance(trust_annotations, bool):
        raise InputError(f"{where}: trust_annotations must be true or false")
    tools_table = values.get("tools", {})
    if not isinstance(tools_table, Mapping):
        raise InputError(f"{where}: tools must be a table of tables ([mcp.tools.NAME])")
    return McpServerSpec(
        name=name,
        command=tuple(command),
        url=url,
        env=tuple(env),
        cwd=str(folder) if url is None else None,
        timeout=_seconds(values["timeout"], where, "timeout") if "timeout" in values else None,
        startup_timeout=(
            _seconds(values["startup_timeout"], where, "startup_timeout")
            if "startup_timeout" in values
            else DEFAULT_MCP_STARTUP_TIMEOUT
        ),
        trust_annotations=trust_annotations,
        tools={
            str(tool): _tool_policy(policy, f"{where} tools.{tool}")
            for tool, policy in tools_table.items()
        },
        source=source,
    )


def _is_http_url(text: str) -> bool:
    parts = urllib.parse.urlsplit(text)
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def parse_mcp_flag(text: str, folder: Path | None = None) -> McpServerSpec:
    """The server of one ``--mcp`` value: ``URL`` (streamable HTTP), ``COMMAND ARGS``
    (stdio, split like a shell line; no shell runs it), either prefixed by ``NAME=``.

    Args:
        text: the flag's value.
        folder: the folder a stdio server starts in (default: the working folder).

    Raises:
        InputError: an empty command, a line that cannot be split, a bad NAME.
    """
    where = f"--mcp {text!r}"
    name: str | None = None
    match = re.fullmatch(r"([^\s=:/]+)=(.*)", text, flags=re.DOTALL)
    if match is not None:
        name, text = match.group(1), match.group(2)
        if not _NAME.fullmatch(name):
            raise InputError(
                f"{where}: NAME must be a word of letters, digits, '_', '-' or '.' (at most 64)"
            )
    text = text.strip()
    if _is_http_url(text) and not any(character.isspace() for character in text):
        return McpServerSpec(name=name, url=text)
    try:
        command = tuple(shlex.split(text))
    except ValueError as error:
        raise InputError(f"{where}: the command cannot be split: {error}") from error
    if not command:
        raise InputError(
            f"{where}: give a command (--mcp 'python server.py') or a URL "
            "(--mcp http://127.0.0.1:8000/mcp), optionally NAME=... before it"
        )
    return McpServerSpec(name=name, command=command, cwd=str(folder or Path.cwd()))


def load_mcp_config(start: Path | None = None) -> McpConfig | None:
    """The MCP servers of the project: the ``mcp`` tables of the nearest ``plandag.toml``,
    else of ``[tool.plandag]`` in the nearest ``pyproject.toml`` (the same files as
    :func:`load_settings`; a ``plandag.toml`` that lists servers replaces the
    ``pyproject.toml``'s list, as any of its settings does).

    The servers of a project file start only once the person trusts the file
    (:mod:`plandag.trust`); this function only reads them.

    Args:
        start: the folder to search from (default: the working directory).

    Returns:
        The file and its servers, or None when no project file lists any.

    Raises:
        InputError: a file is not valid TOML, or an ``mcp`` table is malformed
            (:func:`mcp_server_spec`).
    """
    folder = (start or Path.cwd()).resolve()
    chosen: tuple[Path, Any, str] | None = None
    for path, table, label in _project_tables(folder):
        if MCP_KEY in table:
            chosen = (path, table[MCP_KEY], label)
    if chosen is None:
        return None
    path, entries, label = chosen
    prefix = "[[tool.plandag.mcp]]" if label else "[[mcp]]"
    if not isinstance(entries, list):
        raise InputError(f"{path}: mcp must be an array of tables ({prefix})")
    servers = tuple(
        mcp_server_spec(
            entry,
            f"{path} {prefix} #{index}",
            folder=path.parent.resolve(),
            source=str(path.resolve()),
        )
        for index, entry in enumerate(entries, start=1)
    )
    return McpConfig(path.resolve(), servers) if servers else None
