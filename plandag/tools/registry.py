"""The registry: which tools and check kinds a run may use, by name."""

from __future__ import annotations

import difflib
import functools
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from plandag.checks.base import CheckDefinition
from plandag.errors import ToolLoadError
from plandag.tools.base import Tool

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from plandag.config import McpServerSpec

__all__ = [
    "BUILT_IN_APPLICATIONS",
    "ENTRY_POINT_GROUP",
    "Registry",
    "default_registry",
    "installed_applications",
    "outside_builtins",
    "registry_with",
]


class Registry:
    """Tools and check kinds by name.

    A name can be registered once; registering a different object under a taken name raises
    ``ValueError`` (a user's tools file cannot silently replace ``write_json``).

    ``tools`` and ``checks`` hold what is registered: what a planner is shown. A registry
    made with ``resolve_installed=True`` also finds, when asked by name
    (:meth:`find_tool`, :meth:`find_check`: the compiler asks for every name a plan uses),
    the tools and checks of the installed applications (the ``plandag.tools`` entry-point
    group), and registers the application that provides the name then. So a stored plan
    that names an application's tool compiles, while a planner is given only the
    applications of the job at hand (:func:`default_registry`).
    """

    def __init__(
        self,
        tools: Iterable[Tool] = (),
        checks: Iterable[CheckDefinition] = (),
        *,
        resolve_installed: bool = False,
    ) -> None:
        self.tools: dict[str, Tool] = {}
        self.checks: dict[str, CheckDefinition] = {}
        self.resolve_installed = resolve_installed
        self.applications: list[str] = []
        """Names of the installed applications registered (:meth:`add_application`)."""
        self.withheld: dict[str, Tool] = {}
        """The tools taken out by :meth:`withhold`, by name."""
        self.mcp_servers: list[McpServerSpec] = []
        """The MCP servers whose tools are registered, as started (each with its name):
        :meth:`plandag.tools.mcp.McpServers.register`."""
        for item in tools:
            self.add_tool(item)
        for definition in checks:
            self.add_check(definition)

    def add_tool(self, item: Tool) -> None:
        """Register a tool. Raises ValueError when another tool already has its name."""
        existing = self.tools.get(item.name)
        if existing is not None and existing is not item:
            raise ValueError(f"a tool named {item.name!r} is already registered")
        self.tools[item.name] = item

    def add_check(self, definition: CheckDefinition) -> None:
        """Register a check kind. Raises ValueError when the name is taken."""
        existing = self.checks.get(definition.name)
        if existing is not None and existing is not definition:
            raise ValueError(f"a check named {definition.name!r} is already registered")
        self.checks[definition.name] = definition

    def copy(self) -> Registry:
        """A new registry with the same tools, checks and ``resolve_installed`` (to add a
        user's tools to)."""
        copied = Registry(
            self.tools.values(), self.checks.values(), resolve_installed=self.resolve_installed
        )
        copied.applications = list(self.applications)
        copied.withheld = dict(self.withheld)
        copied.mcp_servers = list(self.mcp_servers)
        return copied

    def withhold(self, names: Iterable[str]) -> list[str]:
        """Take the tools ``names`` out of the registry: a plan that names one no longer
        compiles (``unknown_tool``), and a tools file that imports one (``from
        plandag.tools import read_file``) does not bring it back (:meth:`load_file` skips
        it, as it skips any registered tool it imports). A tool of the same name that a
        tools file defines itself may still be registered afterwards.

        Args:
            names: tool names; those not registered are passed over.

        Returns:
            The names taken out, in the order given.
        """
        removed: list[str] = []
        for name in names:
            item = self.tools.pop(name, None)
            if item is not None:
                self.withheld[name] = item
                removed.append(name)
        return removed

    def add_application(self, name: str) -> None:
        """Register the tools and checks of the installed application ``name`` (an entry
        point of the ``plandag.tools`` group, such as ``nfe``); nothing when it already is.

        Raises:
            ToolLoadError: no application of that name is installed (the message lists
                those that are), or it fails to load.
            ValueError: one of its names is already registered to another object.
        """
        if name in self.applications:
            return
        tools, checks = _application(name)
        for item in tools:
            self.add_tool(item)
        for definition in checks:
            self.add_check(definition)
        self.applications.append(name)

    def find_tool(self, name: str) -> Tool | None:
        """The tool ``name``: registered, else (with ``resolve_installed``) provided by an
        installed application, which is then registered; None when there is none or it was
        withheld (:meth:`withhold`; an installed application that fails to load is passed
        over)."""
        found = self.tools.get(name)
        if found is None and self.resolve_installed and name not in self.withheld:
            self._resolve(name, "tools")
            found = self.tools.get(name)
        return found

    def find_check(self, name: str) -> CheckDefinition | None:
        """The check kind ``name``, found as :meth:`find_tool` finds a tool."""
        found = self.checks.get(name)
        if found is None and self.resolve_installed:
            self._resolve(name, "checks")
            found = self.checks.get(name)
        return found

    def provider_of(self, name: str) -> str | None:
        """The installed application, not registered here, that provides a tool or check
        kind ``name`` (for "pass --tools APPLICATION" hints), or None. Applications that
        fail to load are passed over."""
        for application in installed_applications():
            if application in self.applications:
                continue
            try:
                tools, checks = _application(application)
            except ToolLoadError:
                continue
            if name in {item.name for item in tools} | {item.name for item in checks}:
                return application
        return None

    def _resolve(self, name: str, kind: str) -> None:
        """Register the installed application that provides tool (``kind="tools"``) or
        check kind ``name``; applications that fail to load are passed over (the name then
        stays unknown, and the compiler says so)."""
        for application in installed_applications():
            if application in self.applications:
                continue
            try:
                tools, checks = _application(application)
            except ToolLoadError:
                continue
            provided: tuple[Tool | CheckDefinition, ...] = tools if kind == "tools" else checks
            if any(item.name == name for item in provided):
                self.add_application(application)
                return

    def nearest_tools(self, name: str, count: int = 3) -> list[str]:
        """Registered tool names closest to ``name`` (for "unknown tool" hints)."""
        return difflib.get_close_matches(name, list(self.tools), n=count, cutoff=0.4)

    def nearest_checks(self, name: str, count: int = 3) -> list[str]:
        """Registered check kinds closest to ``name``."""
        return difflib.get_close_matches(name, list(self.checks), n=count, cutoff=0.4)

    def load_file(self, path: str | Path) -> list[str]:
        """Import a Python file and register every ``@tool`` and ``@check`` defined in it.

        Args:
            path: a ``.py`` file (``--tools FILE.py``).

        Returns:
            The names registered from the file, tools then checks.

        Raises:
            ToolLoadError: the file is missing, fails to import, defines nothing, or
                defines a name that is already registered.
        """
        file = Path(path)
        if file.is_dir():
            raise ToolLoadError(
                f"tools file {file} is a folder; give the path of a .py file inside it"
            )
        if not file.is_file():
            raise ToolLoadError(f"tools file {file} does not exist; pass a path to a .py file")
        module_name = f"plandag_user_tools_{abs(hash(str(file.resolve())))}"
        spec = importlib.util.spec_from_file_location(module_name, file)
        if spec is None or spec.loader is None:
            raise ToolLoadError(f"tools file {file} cannot be imported; is it a .py file?")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as error:
            sys.modules.pop(module_name, None)
            raise ToolLoadError(
                f"tools file {file} raised {type(error).__name__} on import: {error}"
            ) from error
        values = list(vars(module).values())
        # Tools and checks imported into the file (``from plandag.tools import read_file``)
        # are the registered objects themselves: they are not the file's own.
        tools = [
            value
            for value in values
            if isinstance(value, Tool)
            and self.tools.get(value.name) is not value
            and self.withheld.get(value.name) is not value
        ]
        checks = [
            value
            for value in values
            if isinstance(value, CheckDefinition) and self.checks.get(value.name) is not value
        ]
        tools = list({id(item): item for item in tools}.values())
        checks = list({id(definition): definition for definition in checks}.values())
        if not tools and not checks:
            raise ToolLoadError(
                f"tools file {file} defines no @tool function; decorate your functions "
                "with `from plandag import tool`"
            )
        # Check every name before registering any, so a clash leaves the registry unchanged.
        clashes = [item.name for item in tools if item.name in self.tools]
        clashes += [definition.name for definition in checks if definition.name in self.checks]
        seen: set[str] = set()
        for item in tools:
            if item.name in seen:
                clashes.append(item.name)
            seen.add(item.name)
        if clashes:
            names = ", ".join(repr(name) for name in sorted(set(clashes)))
            raise ToolLoadError(
                f"tools file {file} defines {names}, already registered (a built-in tool or "
                "check, or another tools file); rename it, e.g. with @tool(name=...)"
            )
        for item in tools:
            self.add_tool(item)
        for definition in checks:
            self.add_check(definition)
        return [item.name for item in tools] + [definition.name for definition in checks]


ENTRY_POINT_GROUP = "plandag.tools"
"""The entry-point group through which the model-backed executors, applications (NF-e
extraction, and any third-party package) add tools and checks: each entry point names a
callable that takes no argument and returns ``(tools, checks)``, two iterables of
:class:`Tool` and :class:`~plandag.checks.base.CheckDefinition`."""

BUILT_IN_APPLICATIONS = ("executors",)
"""The entry points of :data:`ENTRY_POINT_GROUP` whose tools :func:`default_registry` holds
among its built-ins: ``executors``, plandag's model-backed steps (``llm``, ``agent``:
:mod:`plandag.executors`), discovered as applications are, so that this package imports
none of them."""


def installed_applications() -> tuple[str, ...]:
    """The names of the installed applications (entry points of the ``plandag.tools``
    group), sorted; read from the packages' metadata, nothing is imported."""
    return tuple(sorted({entry.name for entry in _entry_points()}))


@functools.cache
def _entry_points() -> tuple[EntryPoint, ...]:
    from importlib.metadata import entry_points

    return tuple(entry_points(group=ENTRY_POINT_GROUP))


@functools.cache
def _application(name: str) -> tuple[tuple[Tool, ...], tuple[CheckDefinition, ...]]:
    """The tools and checks of the installed application ``name``, loaded once per
    process."""
    entries = [entry for entry in _entry_points() if entry.name == name]
    if not entries:
        installed = ", ".join(installed_applications()) or "none"
        raise ToolLoadError(
            f"no application named {name!r} is installed under the {ENTRY_POINT_GROUP} "
            f"entry points (installed: {installed}); for a tools file, give its .py path"
        )
    entry = entries[0]
    try:
        tools, checks = entry.load()()
    except Exception as error:
        raise ToolLoadError(
            f"the {ENTRY_POINT_GROUP} entry point {entry.name!r} ({entry.value}) failed to "
            f"load: {type(error).__name__}: {error}; fix or uninstall the package that "
            "provides it"
        ) from error
    return tuple(tools), tuple(checks)


def default_registry(
    applications: Iterable[str] | None = None, *, resolve_installed: bool = True
) -> Registry:
    """A new registry with the built-in tools and checks (files, JSON/XML, HTTP, and the
    model-backed ``llm`` and ``agent``, found through the ``executors`` entry point:
    :data:`BUILT_IN_APPLICATIONS`), the tools and checks of the installed ``applications``
    named, and, with ``resolve_installed``, those of every other installed application found
    when a plan names them (:meth:`Registry.find_tool`).

    What a planner is shown is what is registered: the built-ins and the applications of
    the job at hand (ARCHITECTURE.md, "Layout": applications register through the
    ``plandag.tools`` entry-point group, resolved lazily).

    Args:
        applications: entry-point names to register now (``("nfe",)``); None for none.
        resolve_installed: find other installed applications' tools and checks by name
            (stored plans); False for a registry that holds exactly what it lists (a run
            whose plans are written by a model that was shown that list).

    Raises:
        ToolLoadError: a named application is not installed or cannot be loaded, or a
            built-in entry point is missing (plandag's metadata is older than its code:
            install the package again, ``pip install -e .`` in a checkout).
    """
    from plandag.checks.builtins import BUILTIN_CHECKS
    from plandag.tools.builtins import BUILTIN_TOOLS
    from plandag.tools.http import HTTP_TOOLS

    tools: list[Tool] = [*BUILTIN_TOOLS, *HTTP_TOOLS]
    checks: list[CheckDefinition] = list(BUILTIN_CHECKS)
    for name in BUILT_IN_APPLICATIONS:
        if name not in installed_applications():
            raise ToolLoadError(
                f"the built-in {ENTRY_POINT_GROUP} entry point {name!r} is not installed: "
                "plandag's package metadata is older than its code; install plandag again "
                "(pip install -e . in a checkout)"
            )
        provided_tools, provided_checks = _application(name)
        tools.extend(provided_tools)
        checks.extend(provided_checks)
    registry = Registry(tools, checks, resolve_installed=resolve_installed)
    for name in applications or ():
        registry.add_application(name)
    return registry


def registry_with(
    entries: Iterable[str | Path] | None = None,
    *,
    applications: Iterable[str] = (),
    resolve_installed: bool = True,
    withhold: Iterable[str] = (),
) -> Registry:
    """:func:`default_registry` with ``applications``, less the built-ins named in
    ``withhold`` (:meth:`Registry.withhold`), plus each of ``entries`` (a command's
    ``--tools``, or a stored run's tools): a ``.py`` file whose ``@tool`` and ``@check``
    functions are registered, or the name of an installed application (``nfe``). Each entry
    is loaded once, in order.

    Raises:
        ToolLoadError: an entry is neither a loadable file nor an installed application,
            or an application cannot be loaded.
    """
    registry = default_registry(applications, resolve_installed=resolve_installed)
    registry.withhold(withhold)
    for entry in dict.fromkeys(Path(item) for item in entries or ()):
        if entry.suffix == ".py" or entry.exists():
            registry.load_file(entry)
        elif str(entry) in installed_applications():
            registry.add_application(str(entry))
        else:
            installed = ", ".join(installed_applications()) or "none"
            raise ToolLoadError(
                f"--tools {entry}: no such file, and no installed application of that name "
                f"(installed: {installed}); give a .py file or an application's name"
            )
    return registry


def outside_builtins() -> tuple[str, ...]:
    """The built-in tools that reach outside a run, by what each declares: a path it reads
    or writes, the network, or any effect (``read_file``, ``write_json``, ``http_get``,
    ``http_post``). A research run leaves them out of its registry
    (:func:`plandag.jobs.research.planning.withheld_tools`)."""
    builtins = default_registry(resolve_installed=False).tools.items()
    return tuple(
        name
        for name, item in builtins
        if item.reads is not None
        or item.writes is not None
        or item.egress
        or item.effects != "none"
    )
