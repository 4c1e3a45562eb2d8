"""The write boundary at run time: targets that come from references are checked after
they resolve, before the tool runs; escapes fail the step and write nothing."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from plandag.brakes.retry import RetryPolicy
from plandag.checks import BUILTIN_CHECKS
from plandag.compiler import compile_plan
from plandag.errors import PlanError
from plandag.scheduler import RunLimits, run_plan_sync
from plandag.tools.base import tool
from plandag.tools.boundary import WriteBoundary
from plandag.tools.builtins import write_json
from plandag.tools.registry import Registry


@tool
async def echo(value: Any) -> Any:
    """Return ``value``."""
    return value


REGISTRY = Registry([echo, write_json], BUILTIN_CHECKS)


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """``work/out`` (the boundary and the working directory, so the boundary and
    write_json read relative paths alike) and ``outside`` (empty), with ``work/out/link`` →
    ``outside``."""
    out = tmp_path / "work" / "out"
    out.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (out / "link").symlink_to(outside, target_is_directory=True)
    monkeypatch.chdir(out)
    return out, outside


def plan_writing_to(target: str) -> dict[str, Any]:
    """Step 1 produces the target; step 2 writes JSON there; step 3 depends on step 2."""
    return {
        "steps": [
            {"id": 1, "tool": "echo", "args": {"value": target}},
            {
                "id": 2,
                "tool": "write_json",
                "args": {"path": "<step_1_result>", "data": {"n": 1}},
                "depends_on": [1],
            },
            {"id": 3, "tool": "echo", "args": {"value": "after"}, "depends_on": [2]},
        ]
    }


def escape_targets(out: Path, outside: Path) -> dict[str, tuple[str, Path]]:
    """name → (target as step 1 returns it, the file it would create outside)."""
    return {
        "dotdot": ("../escape.json", out.parent / "escape.json"),
        "absolute": (str(outside / "absolute.json"), outside / "absolute.json"),
        "symlink": ("link/through-link.json", outside / "through-link.json"),
        "symlink_dotdot": ("link/../sneaky.json", outside.parent / "sneaky.json"),
    }


@pytest.mark.parametrize("name", ["dotdot", "absolute", "symlink", "symlink_dotdot"])
def test_escape_through_a_reference_is_refused_at_run_time(
    layout: tuple[Path, Path], name: str
) -> None:
    out, outside = layout
    target, would_write = escape_targets(out, outside)[name]
    compiled = compile_plan(
        plan_writing_to(target), REGISTRY, write_boundary=WriteBoundary.from_specs(["."])
    )
    result = run_plan_sync(compiled, approve="auto")

    assert result.status == "failed"
    assert result.steps[1].status == "succeeded"
    record = result.steps[2]
    assert (record.status, record.reason, record.attempts) == (
        "failed",
        "write_outside_boundary",
        1,
    )
    assert record.error is not None
    assert record.error.type == "BoundaryError"
    assert record.error.message.startswith(f"step 2: write target {target!r} resolves to ")
    assert (result.steps[3].status, result.steps[3].reason) == ("skipped", "upstream_failed")
    # nothing written anywhere: not the file, not a temporary file beside it
    assert not would_write.exists()
    assert sorted(path.name for path in outside.iterdir()) == []
    assert sorted(path.name for path in out.parent.iterdir()) == ["out"]
    assert sorted(path.name for path in out.iterdir()) == ["link"]


def test_a_reference_inside_the_boundary_writes(layout: tuple[Path, Path]) -> None:
    out, outside = layout
    compiled = compile_plan(
        plan_writing_to("reports/a.json"),
        REGISTRY,
        write_boundary=WriteBoundary.from_specs(["reports/"]),
    )
    result = run_plan_sync(compiled, approve="auto")
    assert result.status == "succeeded"
    assert result.steps[2].result == {"path": str(out / "reports" / "a.json"), "bytes": 13}
    assert (out / "reports" / "a.json").read_text() == '{\n  "n": 1\n}\n'
    assert sorted(path.name for path in outside.iterdir()) == []


def test_glob_boundary_refuses_a_reference_outside_the_pattern(
    layout: tuple[Path, Path],
) -> None:
    out, _ = layout
    boundary = WriteBoundary.from_specs(["data/*.json"])
    compiled = compile_plan(plan_writing_to("data/deep/x.json"), REGISTRY, write_boundary=boundary)
    result = run_plan_sync(compiled, approve="auto")
    assert (result.steps[2].status, result.steps[2].reason) == (
        "failed",
        "write_outside_boundary",
    )
    assert not (out / "data").exists()

    compiled = compile_plan(plan_writing_to("data/x.json"), REGISTRY, write_boundary=boundary)
    result = run_plan_sync(compiled, approve="auto")
    assert result.status == "succeeded"
    assert (out / "data" / "x.json").read_text() == '{\n  "n": 1\n}\n'


@pytest.mark.parametrize("name", ["dotdot", "absolute", "symlink", "symlink_dotdot"])
def test_literal_escapes_are_refused_at_compile_time(layout: tuple[Path, Path], name: str) -> None:
    out, outside = layout
    target, would_write = escape_targets(out, outside)[name]
    boundary = WriteBoundary.from_specs(["."])
    plan = {"steps": [{"id": 1, "tool": "write_json", "args": {"path": target, "data": 1}}]}
    with pytest.raises(PlanError) as caught:
        compile_plan(plan, REGISTRY, write_boundary=boundary)
    assert caught.value.codes == ["write_outside_boundary"]
    [diagnostic] = caught.value.diagnostics
    assert diagnostic.step_id == 1
    assert diagnostic.message.startswith(f"write target {target!r} lies outside")
    assert not would_write.exists()


def test_a_run_of_200_writes_holds_the_boundary_while_a_folder_is_swapped_for_a_link(
    tmp_path: Path,
) -> None:
    """200 write_json steps aim at ``out/swap/...`` while threads keep swapping ``swap`` for
    a link to ``outside``: each step succeeds inside or fails ``write_outside_boundary``,
    and nothing (no temporary file either) ever lands outside."""
    out = tmp_path.resolve() / "work" / "out"
    swap = out / "swap"
    swap.mkdir(parents=True)
    outside = tmp_path.resolve() / "outside"
    outside.mkdir()
    stop = threading.Event()

    def swapper(number: int) -> None:
        parked, link = out / f"parked{number}", out / f".link{number}"
        for _ in range(1_000_000):  # bounded; the event stops it long before
            if stop.is_set():
                return
            try:
                os.rename(swap, parked)
            except OSError:
                continue
            with contextlib.suppress(OSError):
                link.symlink_to(outside, target_is_directory=True)
                os.rename(link, swap)
                os.unlink(swap)
            with contextlib.suppress(OSError):
                os.rename(parked, swap)

    steps = [
        {"id": i, "tool": "write_json", "args": {"path": f"{swap}/f{i}.json", "data": i}}
        for i in range(1, 201)
    ]
    compiled = compile_plan(
        {"steps": steps}, REGISTRY, write_boundary=WriteBoundary.from_specs([str(out)])
    )
    threads = [threading.Thread(target=swapper, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    try:
        # the race slows the writes down: the plan-relative time limit is not what is tested
        result = run_plan_sync(
            compiled,
            approve="auto",
            retry=RetryPolicy(retries=0),
            limits=RunLimits(plan_time_factor=None),
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    assert list(outside.rglob("*")) == []
    outcomes = {(step.status, step.reason) for step in result.steps.values()}
    odd = [(s.id, s.reason, s.detail) for s in result.steps.values() if s.reason == "tool_error"]
    assert outcomes <= {("succeeded", None), ("failed", "write_outside_boundary")}, odd
    for step in result.steps.values():
        if step.status == "succeeded":
            assert Path(step.result["path"]).name == f"f{step.id}.json"
