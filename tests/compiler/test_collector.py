"""The garbage collector is paused while a plan compiles and restored after, whatever happens."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

import plandag.compiler.compile as compile_module
from plandag.compiler import compile_plan
from plandag.compiler.collector import paused_collector
from plandag.compiler.patch import compile_patch
from plandag.errors import PlanError
from plandag.tools.registry import Registry
from tests.collector_states import collector_states


def _chain(size: int) -> dict[str, Any]:
    return {
        "version": 1,
        "goal": "count",
        "steps": [
            {"id": step_id, "tool": "add", "args": {"a": step_id}, "depends_on": [step_id - 1]}
            if step_id > 1
            else {"id": 1, "tool": "add", "args": {"a": 1}}
            for step_id in range(1, size + 1)
        ],
    }


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generations collected while the test runs."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(callback)
    yield seen
    gc.callbacks.remove(callback)


def test_the_collector_is_off_while_a_plan_compiles(
    registry: Registry, collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    states = collector_states(monkeypatch, compile_module, "validate_plan")
    compile_plan(_chain(3), registry)
    assert states == [False]
    assert gc.isenabled()


def test_no_collection_runs_while_a_large_plan_compiles(
    registry: Registry,
    collector_on: None,
    collections: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    during: list[int] = []
    compiled_steps = compile_module._compiled_steps

    def last_pass(*args: Any, **kwargs: Any) -> Any:
        result = compiled_steps(*args, **kwargs)
        during.append(len(collections))  # the collections so far, all inside the compile
        return result

    monkeypatch.setattr(compile_module, "_compiled_steps", last_pass)
    plan = _chain(2000)
    collections.clear()
    compile_plan(plan, registry, max_steps=2000)
    assert during == [0]
    assert gc.isenabled()


def test_the_collector_is_on_again_after_a_compile_that_raises(
    registry: Registry, collector_on: None
) -> None:
    bad = _chain(3)
    bad["steps"][2]["tool"] = "no_such_tool"
    with pytest.raises(PlanError):
        compile_plan(bad, registry)
    assert gc.isenabled()
    with pytest.raises(ValueError, match="max_steps"):
        compile_plan(_chain(1), registry, max_steps=0)
    assert gc.isenabled()


def test_the_collector_is_on_again_after_an_interrupted_compile(
    registry: Registry, collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(compile_module, "validate_plan", interrupted)
    with pytest.raises(KeyboardInterrupt):
        compile_plan(_chain(2), registry)
    assert gc.isenabled()


def test_a_collector_turned_off_before_stays_off(registry: Registry, collector_on: None) -> None:
    gc.disable()
    compile_plan(_chain(2), registry)
    assert not gc.isenabled()
    with pytest.raises(PlanError):
        compile_plan({"steps": "no"}, registry)
    assert not gc.isenabled()


def test_nested_pauses_keep_it_off_until_the_outermost_ends(collector_on: None) -> None:
    with paused_collector():
        with paused_collector():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_overlapping_pauses_restore_it_when_the_last_one_ends(collector_on: None) -> None:
    first, second = ExitStack(), ExitStack()
    first.enter_context(paused_collector())
    second.enter_context(paused_collector())  # another thread's compile, say
    first.close()  # the first ends while the second still runs
    assert not gc.isenabled()
    second.close()
    assert gc.isenabled()


def test_a_patch_compiles_with_the_collector_off(
    registry: Registry, collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import plandag.compiler.patch as patch_module

    states = collector_states(monkeypatch, patch_module, "validate_plan")
    compiled = compile_plan(_chain(2), registry)
    compile_patch(compiled, [{"id": 3, "tool": "add", "args": {"a": 3}}], registry)
    assert gc.isenabled()
    assert all(state is False for state in states)
