"""The registry: which tools and check kinds a run may use, by name."""

from __future__ import annotations

import difflib
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


def default_registry() -> Registry:
    """A new registry with the built-in tools and checks, the HTTP and NF-e ones included."""
    from plandag.checks.builtins import BUILTIN_CHECKS
    from plandag.extract.nfe.tools import NFE_CHECKS, NFE_TOOLS
    from plandag.tools.builtins import BUILTIN_TOOLS
    from plandag.tools.http import HTTP_TOOLS

    return Registry([*BUILTIN_TOOLS, *HTTP_TOOLS, *NFE_TOOLS], [*BUILTIN_CHECKS, *NFE_CHECKS])
