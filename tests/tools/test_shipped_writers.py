"""Every shipped tool that writes files holds the write boundary while a folder of its target
is swapped for a link: the built-in tools, the installed applications' and the examples'
(``examples/**/*.py``), found by what they declare (``writes=`` a path argument), so a new
one is raced without editing this file. Nothing, not even a temporary file, lands outside."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from plandag.brakes.retry import RetryPolicy
from plandag.compiler import compile_plan
from plandag.scheduler import RunLimits, run_plan_sync
from plandag.tools.base import Tool
from plandag.tools.boundary import WriteBoundary
from plandag.tools.registry import Registry, default_registry, installed_applications

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEPS = 400
OK = (None, "write_outside_boundary")

pytestmark = pytest.mark.timeout(120)


def writes_files(tool: Tool) -> bool:
    """True for a tool that writes files: it names a written argument that is not a URL it
    reaches over the network."""
    return tool.writes is not None and tool.writes != tool.reaches


def shipped_registries() -> Iterator[tuple[str, Registry]]:
    """The built-in tools with every installed application's, then each example file's."""
    yield "built-in", default_registry(installed_applications())
    for file in sorted(EXAMPLES.rglob("*.py")):
        registry = Registry([], [])
        registry.load_file(file)
        yield str(file.relative_to(EXAMPLES.parent)), registry


def shipped_writers() -> list[Any]:
    found = []
    for origin, registry in shipped_registries():
        for name, tool in sorted(registry.tools.items()):
            if writes_files(tool):
                found.append(pytest.param(tool, id=f"{origin}:{name}"))
    return found


WRITERS = shipped_writers()


def sample(schema: dict[str, Any]) -> Any:
    """A value of the JSON Schema type ``schema`` names (an object when it names none)."""
    kinds = {"string": "a line", "integer": 1, "number": 1.5, "boolean": True, "array": [1]}
    return kinds.get(schema.get("type", "object"), {"n": 1})


def arguments(tool: Tool, target: str) -> dict[str, Any]:
    """The tool's required arguments, with ``target`` as the one it writes."""
    schema = tool.json_schema()
    args = {
        name: sample(field)
        for name, field in schema.get("properties", {}).items()
        if name in schema.get("required", [])
    }
    assert isinstance(tool.writes, str)
    args[tool.writes] = target
    return args


def test_the_shipped_writers_are_found() -> None:
    names = {param.values[0].name for param in WRITERS}
    assert {"write_json", "append_line"} <= names


SWAPPER = r"""
import os, sys, time

out, outside = sys.argv[1], sys.argv[2]
swap, link = os.path.join(out, "swap"), os.path.join(out, ".link")
os.symlink(outside, link, target_is_directory=True)
print("swapping", flush=True)
deadline = time.monotonic() + 60  # the test ends it long before
number = 0
while time.monotonic() < deadline:
    number += 1
    parked = os.path.join(out, "parked%d" % number)
    try:
        os.rename(swap, parked)  # the folder out of the way...
    except OSError:
        continue
    try:
        os.rename(link, swap)  # ...a link to outside in its place...
        os.rename(swap, link)
    except OSError:
        pass
    try:
        os.rename(parked, swap)  # ...and the folder back
    except OSError:
        pass
"""
"""Swaps ``out/swap`` for a link to ``outside`` and back as fast as it can, in a process of
its own (so that it runs alongside the run, not in turns with it under the GIL); a folder
that a writer created meanwhile stays, and its parked original is left aside inside."""


@pytest.mark.parametrize("tool", WRITERS)
def test_a_shipped_writer_writes_nothing_outside_while_a_folder_is_swapped_for_a_link(
    tmp_path: Path, tool: Tool
) -> None:
    out = tmp_path.resolve() / "work" / "out"
    swap = out / "swap"
    swap.mkdir(parents=True)
    outside = tmp_path.resolve() / "outside"
    outside.mkdir()
    steps = [
        {"id": i, "tool": tool.name, "args": arguments(tool, f"{swap}/f{i}.out")}
        for i in range(1, STEPS + 1)
    ]
    compiled = compile_plan(
        {"steps": steps},
        Registry([tool], []),
        write_boundary=WriteBoundary.from_specs([str(out)]),
    )
    with subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(out), str(outside)], stdout=subprocess.PIPE, text=True
    ) as swapper:
        try:
            assert swapper.stdout is not None
            assert swapper.stdout.readline() == "swapping\n"
            result = run_plan_sync(
                compiled,
                approve="auto",
                retry=RetryPolicy(retries=0),
                # the race slows the writes down and fails some: neither the plan-relative
                # time limit nor the circuit breaker is what is tested
                limits=RunLimits(plan_time_factor=None, breaker_after=None),
            )
        finally:
            swapper.terminate()  # leaving the block waits for it to end
    landed_outside = sorted(path.name for path in outside.rglob("*"))
    assert landed_outside == [], f"{len(landed_outside)} of {STEPS} writes landed outside"
    outcomes = {(step.status, step.reason) for step in result.steps.values()}
    odd = [(s.id, s.reason, s.detail) for s in result.steps.values() if s.reason not in OK]
    assert outcomes <= {("succeeded", None), ("failed", "write_outside_boundary")}, odd
    assert ("succeeded", None) in outcomes
