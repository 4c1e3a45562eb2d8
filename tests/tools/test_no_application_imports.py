"""The core knows no application: NF-e, contracts and research register their tools and
checks through the ``plandag.tools`` entry-point group, which is resolved lazily; a planner
is given the tools of the job at hand, while a stored plan naming an installed
application's tool still compiles."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import plandag
from plandag.compiler import compile_plan
from plandag.errors import PlanError, ToolLoadError
from plandag.extract.nfe.tools import NFE_CHECKS, NFE_TOOLS
from plandag.tools.registry import ENTRY_POINT_GROUP, default_registry, installed_applications

APPLICATIONS = ("plandag.extract", "plandag.jobs")
CORE = ("tools", "executors", "scheduler", "compiler", "planner")
NFE_TOOL_NAMES = sorted(item.name for item in NFE_TOOLS)


def _imported_modules(path: Path) -> list[str]:
    """Every module ``path`` imports (at any depth, lazily too), and every string constant
    that names a module of an application (``importlib.import_module("plandag.jobs...")``)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names.append(node.module)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith(APPLICATIONS)
            and " " not in node.value
        ):
            names.append(node.value)
    return names


def test_nothing_in_the_core_imports_an_application() -> None:
    root = Path(plandag.__file__).parent
    files = [path for name in CORE for path in sorted((root / name).rglob("*.py"))]
    # executors/ may not exist in every checkout; the others must, or the scan is empty
    assert {path.relative_to(root).parts[0] for path in files} >= set(CORE) - {"executors"}
    offending = [
        f"{path.relative_to(root)}: {name}"
        for path in files
        for name in _imported_modules(path)
        if name.startswith(APPLICATIONS)
    ]
    assert offending == []


def test_the_scan_sees_lazy_imports_and_module_names(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        "import importlib\n"
        "def later():\n"
        "    from plandag.jobs.contracts import evaluate\n"
        "    return importlib.import_module('plandag.extract.nfe.tools')\n",
        encoding="utf-8",
    )
    assert _imported_modules(source) == [
        "importlib",
        "plandag.jobs.contracts",
        "plandag.extract.nfe.tools",
    ]


def test_the_nfe_application_registers_through_the_entry_point_group() -> None:
    from importlib.metadata import entry_points

    assert {entry.value for entry in entry_points(group=ENTRY_POINT_GROUP)} >= {
        "plandag.extract.nfe.tools:plandag_tools"
    }
    assert "nfe" in installed_applications()
    registry = default_registry(["nfe"])
    assert {item.name for item in NFE_TOOLS} <= set(registry.tools)
    assert {definition.name for definition in NFE_CHECKS} <= set(registry.checks)
    assert registry.applications == ["nfe"]


def test_the_default_registry_lists_the_built_ins_only() -> None:
    registry = default_registry()

    assert set(NFE_TOOL_NAMES).isdisjoint(registry.tools)
    assert {"read_file", "write_json", "http_get"} <= set(registry.tools)
    assert registry.applications == []


def _nfe_plan() -> str:
    return json.dumps(
        {
            "version": 1,
            "goal": "parse one invoice",
            "steps": [
                {"id": 1, "tool": "read_file", "args": {"path": "a.xml"}},
                {
                    "id": 2,
                    "tool": "nfe_parse",
                    "args": {"data": "<step_1_result>"},
                    "depends_on": [1],
                },
            ],
        }
    )


def test_a_stored_plan_naming_an_installed_applications_tool_compiles() -> None:
    registry = default_registry()

    compiled = compile_plan(_nfe_plan(), registry)

    assert compiled.steps[2].tool.name == "nfe_parse"
    assert registry.applications == ["nfe"]  # registered when the plan named it
    assert set(NFE_TOOL_NAMES) <= set(registry.tools)


def test_a_planners_registry_refuses_it_and_says_how_to_give_it() -> None:
    registry = default_registry(resolve_installed=False)

    with pytest.raises(PlanError) as caught:
        compile_plan(_nfe_plan(), registry)

    [diagnostic] = caught.value.diagnostics
    assert diagnostic.code == "unknown_tool"
    assert diagnostic.hint == (
        "'nfe_parse' is a tool or check of the installed application 'nfe', not given to this "
        "run: pass --tools nfe (Python: registry.add_application('nfe'))"
    )
    assert registry.applications == []


def test_an_unknown_application_is_refused_with_the_installed_ones() -> None:
    with pytest.raises(ToolLoadError, match=r"no application named 'nope' is installed .*nfe"):
        default_registry(["nope"])


def test_the_executors_register_through_the_entry_point_group_as_built_ins() -> None:
    from importlib.metadata import entry_points

    values = {entry.name: entry.value for entry in entry_points(group=ENTRY_POINT_GROUP)}
    assert values["executors"] == "plandag.executors:plandag_tools"
    registry = default_registry()
    assert [name for name in registry.tools if name in ("llm", "agent")] == ["llm", "agent"]
    assert registry.applications == []  # built-ins, not an application of the job at hand


def test_the_tools_import_no_executor() -> None:
    root = Path(plandag.__file__).parent
    offending = [
        f"{path.relative_to(root)}: {name}"
        for path in sorted((root / "tools").rglob("*.py"))
        for name in _imported_modules(path)
        if name.startswith("plandag.executors")
    ]
    assert offending == []


def test_metadata_without_the_executors_entry_point_says_to_install_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from plandag.tools import registry as registry_module

    monkeypatch.setattr(registry_module, "installed_applications", lambda: ("nfe",))
    with pytest.raises(ToolLoadError, match=r"'executors' is not installed.*install plandag"):
        default_registry()
