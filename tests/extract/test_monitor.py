"""The batch monitor: heartbeats, stalls and the stop on a stall (extract's brakes)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from plandag.extract.monitor import BatchMonitor


def events(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_heartbeats_count_documents(tmp_path: Path) -> None:
    path = tmp_path / "beats.jsonl"
    monitor = BatchMonitor(path, every=0.05)

    async def main() -> None:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(monitor.watch, scope)
                for done in range(1, 4):
                    await anyio.sleep(0.06)
                    monitor.update(done, 3)
                group.cancel_scope.cancel()

    anyio.run(main)
    monitor.close("finished")
    lines = events(path)
    assert lines[0]["event"] == "batch_started"
    assert lines[-1]["event"] == "batch_finished"
    assert (lines[-1]["status"], lines[-1]["done"], lines[-1]["total"]) == ("finished", 3, 3)
    beats = [line for line in lines if line["event"] == "heartbeat"]
    assert len(beats) >= 2
    assert {"time", "elapsed_s", "done", "total", "pending", "idle_s"} <= set(beats[0])
    assert not any(line["event"] == "stall" for line in lines)


def test_a_stall_is_reported_once_and_stops_the_batch(tmp_path: Path) -> None:
    path = tmp_path / "beats.jsonl"
    monitor = BatchMonitor(path, every=10.0, stall_after=0.1, stop_on_stall=True)
    reached_end = []

    async def main() -> None:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as group:
                group.start_soon(monitor.watch, scope)
                monitor.update(1, 5)
                await anyio.sleep(5)  # no progress: the stall cancels the scope
                reached_end.append(True)

    anyio.run(main)
    monitor.close("stalled")
    assert reached_end == []
    assert monitor.stalled is True
    stalls = [line for line in events(path) if line["event"] == "stall"]
    assert len(stalls) == 1
    assert stalls[0]["stopping"] is True
    assert stalls[0]["idle_s"] >= 0.1


def test_bad_settings_are_refused() -> None:
    # stopping on a stall is the default, so it no longer needs stall_after: without a
    # threshold there is nothing to stop on
    assert BatchMonitor(None, stop_on_stall=True).stall_after is None
    with pytest.raises(ValueError, match="heartbeat_every must be > 0"):
        BatchMonitor(None, every=0)
