"""A run store that another process holds locked never loses what resume relies on
(README, "Durable runs": a crash at any moment leaves the store consistent; a step whose tool
has effects is committed as started before its tool runs)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from plandag.brakes.retry import RetryPolicy
from plandag.compiler import compile_plan
from plandag.scheduler import run_plan
from plandag.store import Store, StoreRecorder
from plandag.tools import tool
from plandag.tools.registry import Registry

CALLS: list[str] = []


@tool
def read(text: str) -> str:
    """Read TEXT."""
    CALLS.append(f"read {text}")
    return text


@tool(effects="write")
def send(text: str) -> str:
    """Send TEXT (not idempotent)."""
    CALLS.append(f"send {text}")
    return f"sent {text}"


PLAN = {
    "steps": [
        {"id": 1, "tool": "read", "args": {"text": "a"}},
        {"id": 2, "tool": "send", "args": {"text": "<step_1_result>"}, "depends_on": [1]},
    ],
    "output": "<step_2_result>",
}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    CALLS.clear()
    opened = Store(tmp_path / "runs.sqlite3", busy_timeout_s=0.05)
    opened.create_run("r", command="exec", goal=None, params={}, options={})
    yield opened
    opened.close()


def _lock(path: Path) -> sqlite3.Connection:
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN EXCLUSIVE")
    return other


def _recorder(store: Store) -> tuple[StoreRecorder, object]:
    compiled = compile_plan(PLAN, Registry([read, send]))
    return StoreRecorder(store, "r", compiled.steps, compiled.params), compiled


def _run(recorder: StoreRecorder, compiled: object, retries: int) -> object:
    return anyio.run(
        lambda: run_plan(
            compiled,  # type: ignore[arg-type]
            approve="auto",
            run_id="r",
            observers=[recorder],
            retry=RetryPolicy(retries=retries, base_delay=0.3, jitter=False),
        )
    )


def test_an_effect_is_never_run_unrecorded(store: Store) -> None:
    recorder, compiled = _recorder(store)
    other = _lock(store.path)
    try:
        result = _run(recorder, compiled, retries=0)
    finally:
        other.execute("COMMIT")
        other.close()
    assert CALLS == ["read a"]  # the step with effects never ran: its start was not recorded
    assert result.steps[2].status == "failed"  # type: ignore[attr-defined]
    assert result.steps[2].error.type == "NotStartedError"  # type: ignore[attr-defined]
    # locked to the end: the final state could not be written, and the recorder says so
    assert isinstance(recorder.failure, sqlite3.OperationalError)
    recorder.reconcile(result, attempts=1)  # type: ignore[arg-type]  # the lock is gone now
    assert recorder.failure is None
    rows = store.steps("r")
    assert (rows[1].status, rows[1].result) == ("succeeded", "a")
    assert (rows[2].status, rows[2].error["type"]) == ("failed", "NotStartedError")  # type: ignore[index]


def test_a_start_refused_by_a_lock_is_retried_once_the_lock_is_gone(store: Store) -> None:
    recorder, compiled = _recorder(store)
    other = _lock(store.path)

    def release() -> None:
        other.execute("COMMIT")
        other.close()

    timer = threading.Timer(0.15, release)
    timer.start()
    try:
        result = _run(recorder, compiled, retries=2)
    finally:
        timer.join()
    assert CALLS == ["read a", "send a"]  # sent once, after the lock went away
    assert result.status == "succeeded"  # type: ignore[attr-defined]
    rows = store.steps("r")
    assert (rows[2].status, rows[2].result, rows[2].attempts) == ("succeeded", "sent a", 2)
    assert recorder.failure is None


def test_writes_that_failed_are_kept_and_retried(tmp_path: Path) -> None:
    first = Store(tmp_path / "s.sqlite3", busy_timeout_s=0.05)
    first.create_run("r", command="exec", goal=None, params={}, options={})
    first.declare_steps("r", [(1, "t", "none")])
    first.step_started("r", 1, 1, 1.0, durable=False)
    other = _lock(first.path)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        first.flush()
    other.execute("COMMIT")
    other.close()
    first.flush()  # the same writes, committed now
    assert first.steps("r")[1].status == "running"
    first.close()
