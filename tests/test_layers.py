"""The house's layers, read from the files: no import circle between files of plandag/, and
no import from a lower layer into a higher one (docs/ARCHITECTURE.md, "Layout" and its layer
order).

Every import counts: at module level, inside a function, under ``TYPE_CHECKING`` (each says
what a file knows; moving an import into a function changes nothing). A package's
``__init__`` is looked through: ``from plandag.x import Name`` is an arrow to the file under
``plandag/x/`` that defines ``Name`` (or to the ``__init__`` itself when it defines it), and
an ``__init__`` counts only the imports it runs when imported (its module-level ones). The
files are read with :mod:`ast`, never imported, so a circle inside one package is seen too.

The known exceptions below are what is left to untangle: each names its files and why it is
left. A new circle or a new crossing fails; so does an exception that no longer happens
(remove it from the list: the lists only shrink).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The layer order of docs/ARCHITECTURE.md, lowest first: a file imports only from its own
#: layer or below. Each name is a part of ``plandag`` (a subpackage or a module); ``plandag``
#: itself is its package face, which defines the version and imports its names lazily.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "plandag",
        "dag",
        "errors",
        "config",
        "trust",
        "lazy",
        "surrogates",
        "brakes",
        "access",
        "telemetry",
        "allowlist",
    ),
    ("tools", "checks"),
    ("compiler",),
    ("models",),
    ("scheduler",),
    ("executors",),
    ("planner",),
    ("store", "trace", "approval", "escalation"),
    ("runs", "library"),
    ("extract", "jobs", "conversation", "bench", "react"),
    ("testing",),
    ("api", "serve", "cli", "__main__"),
)

#: Circles of files that are left, each as the sorted tuple of its files.
KNOWN_CIRCLES: frozenset[tuple[str, ...]] = frozenset()

#: Imports against the layer order that are left, as (importer, imported) files.
KNOWN_CROSSINGS: frozenset[tuple[str, str]] = frozenset(
    {
        # the scripted (offline) modes of the jobs and the bench run on the local stand-in
        # model servers of plandag.testing, which sits above them
        ("plandag.bench.runner", "plandag.testing.script"),
        ("plandag.bench.simulator", "plandag.testing.script"),
        ("plandag.bench.simulator", "plandag.testing.server"),
        ("plandag.jobs.contracts.scripted", "plandag.testing.script"),
        ("plandag.jobs.contracts.scripted", "plandag.testing.server"),
        ("plandag.jobs.research.scripted", "plandag.testing.script"),
        ("plandag.jobs.research.scripted", "plandag.testing.server"),
    }
)


@dataclass(frozen=True)
class Imports:
    """The files of plandag/ and the files each imports (module names; a package's
    ``__init__`` as ``NAME.__init__``)."""

    arrows: dict[str, frozenset[str]]


@functools.cache
def read_imports(root: Path = ROOT) -> Imports:
    """Every import between files of ``root``/plandag, read with :mod:`ast`."""
    paths = {
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): path
        for path in sorted((root / "plandag").rglob("*.py"))
    }
    trees = {name: ast.parse(path.read_text("utf-8")) for name, path in paths.items()}
    packages = {name for name, path in paths.items() if path.name == "__init__.py"}

    def imported_module(importer: str, node: ast.ImportFrom) -> str | None:
        if node.level:
            base = importer.split(".") if importer in packages else importer.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join([*base, *([node.module] if node.module else [])])
        else:
            target = node.module or ""
        return target if target in paths else None

    def origin(module: str, name: str, seen: frozenset[tuple[str, str]] = frozenset()) -> str:
        """The file that ``name``, taken from ``module``, comes from."""
        if module not in packages or (module, name) in seen:
            return module
        if f"{module}.{name}" in paths:
            return f"{module}.{name}"
        for node in ast.walk(trees[module]):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        source = imported_module(module, node)
                        if source is not None:
                            return origin(source, alias.name, seen | {(module, name)})
        return module

    def node(module: str) -> str:
        return f"{module}.__init__" if module in packages else module

    arrows: dict[str, set[str]] = {node(name): set() for name in paths}
    for importer, tree in trees.items():
        statements: Iterator[ast.AST] = iter(tree.body) if importer in packages else ast.walk(tree)
        for statement in statements:
            targets: list[str] = []
            if isinstance(statement, ast.Import):
                targets = [alias.name for alias in statement.names if alias.name in paths]
            elif isinstance(statement, ast.ImportFrom):
                module = imported_module(importer, statement)
                if module is not None:
                    targets = [origin(module, alias.name) for alias in statement.names]
            for target in targets:
                if target in packages and importer in packages:
                    continue  # one package face handing on another's names
                if target != importer:
                    arrows[node(importer)].add(node(target))
    return Imports({name: frozenset(targets) for name, targets in arrows.items()})


def circles(imports: Imports) -> set[tuple[str, ...]]:
    """The strongly connected components of more than one file (Tarjan's algorithm, with
    an explicit stack), each as a sorted tuple."""
    arrows = imports.arrows
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[tuple[str, ...]] = set()
    counter = 0
    for start in sorted(arrows):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(arrows[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            vertex, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(arrows.get(successor, ())))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[vertex] = min(low[vertex], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[vertex])
            if low[vertex] == index[vertex]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == vertex:
                        break
                if len(component) > 1:
                    found.add(tuple(sorted(component)))
    return found


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the part of plandag that ``module`` belongs to.

    Raises:
        AssertionError: the part is in no layer (add it to LAYERS and to ARCHITECTURE.md).
    """
    parts = module.removesuffix(".__init__").split(".")
    part = parts[1] if len(parts) > 1 else parts[0]
    for level, names in enumerate(LAYERS):
        if part in names:
            return level
    raise AssertionError(
        f"{module}: plandag.{part} is in no layer; name it in LAYERS and in the layer order "
        "of docs/ARCHITECTURE.md"
    )


def crossings(imports: Imports) -> set[tuple[str, str]]:
    """Every (importer, imported) pair of files where the imported file's layer is above
    the importer's."""
    found = set()
    for importer, targets in imports.arrows.items():
        for target in targets:
            if layer_of(target) > layer_of(importer):
                found.add((importer.removesuffix(".__init__"), target.removesuffix(".__init__")))
    return found


def test_no_import_circle_between_files_but_the_known_ones() -> None:
    found = circles(read_imports())
    assert found - KNOWN_CIRCLES == set(), "new import circles of files"
    assert KNOWN_CIRCLES - found == set(), "gone: remove them from KNOWN_CIRCLES"


def test_no_import_against_the_layer_order_but_the_known_ones() -> None:
    found = crossings(read_imports())
    assert found - KNOWN_CROSSINGS == set(), "new imports from a lower layer into a higher one"
    assert KNOWN_CROSSINGS - found == set(), "gone: remove them from KNOWN_CROSSINGS"


def test_the_layers_are_those_of_the_architecture_document() -> None:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text("utf-8")
    order = re.search(r"Layer order, lowest first.*?\n\n", text, re.DOTALL)
    assert order is not None, "docs/ARCHITECTURE.md: no 'Layer order, lowest first' paragraph"
    named = re.sub(r"\([^)]*\)", "", order.group(0)).split(":", 1)[1]
    written = [tuple(re.findall(r"`([a-z_]+)`", layer)) for layer in named.split("→")]
    assert written == [layer for layer in LAYERS if layer], (
        "the layer order in docs/ARCHITECTURE.md and LAYERS differ"
    )


def test_the_guard_sees_a_circle_inside_a_function_and_under_type_checking(
    tmp_path: Path,
) -> None:
    package = tmp_path / "plandag"
    (package / "tools").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "tools" / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from plandag.tools import B\nclass A: ...\n"
    )
    (package / "tools" / "b.py").write_text(
        "class B: ...\ndef f():\n    from plandag.tools.a import A\n    return A\n"
    )
    (package / "tools" / "__init__.py").write_text(
        "from plandag.tools.a import A as A\nfrom plandag.tools.b import B as B\n"
    )
    found = circles(read_imports(tmp_path))
    assert found == {("plandag.tools.a", "plandag.tools.b")}


def test_the_guard_sees_an_import_into_a_higher_layer(tmp_path: Path) -> None:
    package = tmp_path / "plandag"
    (package / "tools").mkdir(parents=True)
    (package / "scheduler").mkdir()
    (package / "__init__.py").write_text("")
    (package / "tools" / "__init__.py").write_text("")
    (package / "scheduler" / "__init__.py").write_text("")
    (package / "scheduler" / "runner.py").write_text("def run(): ...\n")
    (package / "tools" / "base.py").write_text(
        "def f():\n    from plandag.scheduler.runner import run\n    return run\n"
    )
    found = crossings(read_imports(tmp_path))
    assert found == {("plandag.tools.base", "plandag.scheduler.runner")}
