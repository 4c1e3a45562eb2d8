"""The registry: which tools and check kinds a run may use, by name."""

from __future__ import annotations

import difflib
import functools
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

from plandag.checks.base import CheckDefinition
from plandag.errors import ToolLoadError
from plandag.tools.base import Tool

__all__ = ["Registry", "default_registry"]


class Registry:
    """Tools and check kinds by name.

    A name can be registered once; registering a different object under a taken name raises
    ``ValueError`` (a user's tools file cannot silently replace ``write_json``).
    """

    def __init__(self, tools: Iterable[Tool] = (), checks: Iterable[CheckDefinition] = ()) -> None:
        self.tools: dict[str, Tool] = {}
        self.checks: dict[str, CheckDefinition] = {}
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
        """A new registry with the same tools and checks (to add a user's tools to)."""
        return Registry(self.tools.values(), self.checks.values())

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
            if isinstance(value, Tool) and self.tools.get(value.name) is not value
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
"""The entry-point group through which applications (NF-e extraction, and any third-party
package) add tools and checks: each entry point names a callable that takes no argument
and returns ``(tools, checks)``, two iterables of :class:`Tool` and
:class:`~plandag.checks.base.CheckDefinition`."""


@functools.cache
def _application_entries() -> tuple[tuple[tuple[Tool, ...], tuple[CheckDefinition, ...]], ...]:
    """The tools and checks of every installed application, loaded once per process, in
    the order of the entry points' names."""
    from importlib.metadata import entry_points

    found = []
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda entry: entry.name):
        try:
            tools, checks = entry.load()()
        except Exception as error:
            raise ToolLoadError(
                f"the {ENTRY_POINT_GROUP} entry point {entry.name!r} ({entry.value}) failed to "
                f"load: {type(error).__name__}: {error}; fix or uninstall the package that "
                "provides it"
            ) from error
        found.append((tuple(tools), tuple(checks)))
    return tuple(found)


def default_registry() -> Registry:
    """A new registry with the built-in tools and checks (files, JSON/XML, HTTP, the
    model-backed ``llm`` and ``agent`` of :mod:`plandag.executors`) and those
    of every application installed under the ``plandag.tools`` entry-point group (the NF-e
    tools among them); resolved lazily, on the first call.

    Raises:
        ToolLoadError: an entry point cannot be loaded (what it is and what to do).
    """
    from plandag.checks.builtins import BUILTIN_CHECKS
    from plandag.executors import EXECUTOR_TOOLS
    from plandag.tools.builtins import BUILTIN_TOOLS
    from plandag.tools.http import HTTP_TOOLS

    tools: list[Tool] = [*BUILTIN_TOOLS, *HTTP_TOOLS, *EXECUTOR_TOOLS]
    checks: list[CheckDefinition] = list(BUILTIN_CHECKS)
    for more_tools, more_checks in _application_entries():
        tools.extend(more_tools)
        checks.extend(more_checks)
    return Registry(tools, checks)
