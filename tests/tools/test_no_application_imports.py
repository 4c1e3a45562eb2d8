"""The core's tools package knows no application: NF-e, contracts and research register
their tools and checks through the ``plandag.tools`` entry-point group instead."""

from __future__ import annotations

import ast
from pathlib import Path

import plandag.tools
from plandag.extract.nfe.tools import NFE_CHECKS, NFE_TOOLS
from plandag.tools.registry import ENTRY_POINT_GROUP, default_registry

APPLICATIONS = ("plandag.extract", "plandag.jobs")


def _imported_modules(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.append(node.module)
    return names


def test_nothing_under_plandag_tools_imports_an_application() -> None:
    folder = Path(plandag.tools.__file__).parent
    offending = [
        f"{path.name}: {name}"
        for path in sorted(folder.rglob("*.py"))
        for name in _imported_modules(path)
        if name.startswith(APPLICATIONS)
    ]
    assert offending == []


def test_the_nfe_application_registers_through_the_entry_point_group() -> None:
    from importlib.metadata import entry_points

    assert {entry.value for entry in entry_points(group=ENTRY_POINT_GROUP)} >= {
        "plandag.extract.nfe.tools:plandag_tools"
    }
    registry = default_registry()
    assert {item.name for item in NFE_TOOLS} <= set(registry.tools)
    assert {definition.name for definition in NFE_CHECKS} <= set(registry.checks)
