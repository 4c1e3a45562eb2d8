"""The columns a run's recorder writes for a step's start and end: inputs without
references, with references and none at all, a result of None, a mapping, a secret; the
masking connection's pass over a row's parameters, type by type; and steps whose starts and
ends the writer's thread takes in groups of a few writes leave the rows written one by one."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from plandag.compiler import compile_plan
from plandag.scheduler import run_plan
from plandag.store import Store, StoreRecorder
from plandag.store.sealing import ScrubbedText, _masked, _masked_item, scrubbed_text
from plandag.tools.base import tool
from plandag.tools.registry import Registry

SECRET = "zq81-recorded-rows-secret-42"


@tool(inline=True)
def _nothing() -> None:
    """Return None."""


@tool(inline=True)
def _echo(n: int, text: str) -> dict[str, Any]:
    """Return n and text."""
    return {"n": n, "text": text}


@tool(effects="write")
def _write(text: str) -> str:
    """Return text (a tool with effects)."""
    return text


PLAN = {
    "version": 1,
    "steps": [
        {"id": 1, "tool": "_nothing", "args": {}},
        {"id": 2, "tool": "_echo", "args": {"n": 2, "text": "two"}},
        {"id": 3, "tool": "_echo", "args": {"n": 3, "text": "<step_2_result.text>"}},
        {"id": 4, "tool": "_echo", "args": {"n": 4, "text": f"key {SECRET}"}},
        {"id": 5, "tool": "_write", "args": {"text": "<step_3_result.text>"}},
    ],
}


def _rows(path: Path) -> dict[int, tuple[Any, ...]]:
    with sqlite3.connect(path) as connection:
        return {
            row[0]: row[1:]
            for row in connection.execute(
                "SELECT step_id, status, attempts, args, result, result_hash, error, effects, "
                "started_at IS NOT NULL, ended_at IS NOT NULL, duration_s IS NOT NULL "
                "FROM step WHERE run_id = 'r1'"
            )
        }


def test_a_runs_step_columns_are_written_as_the_store_writes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECORDED_ROWS_API_KEY", SECRET)
    compiled = compile_plan(PLAN, Registry([_nothing, _echo, _write]))
    path = tmp_path / "runs.sqlite3"
    store = Store(path)
    store.create_run("r1", command="test", goal=None, params={}, options={})
    recorder = StoreRecorder(store, "r1", compiled.steps, compiled.params)
    result = anyio.run(
        lambda: run_plan(
            compiled, run_id="r1", observers=[recorder], max_concurrency=1, approve="auto"
        )
    )
    assert result.succeeded
    store.close()
    rows = _rows(path)
    sealed = '{"$env_text":["key ",{"$env":"RECORDED_ROWS_API_KEY"}]}'
    two = '{"n":2,"text":"two"}'
    three = '{"n":3,"text":"two"}'
    timed = ("none", 1, 1, 1)
    masked = '{"n":4,"text":"key [secret]"}'
    kept = f'{{"n":4,"text":{sealed}}}'
    assert rows == {
        1: ("succeeded", 1, "{}", "null", None, None, *timed),
        2: ("succeeded", 1, two, two, None, None, *timed),
        3: ("succeeded", 1, three, three, None, None, *timed),
        # inputs are for reading (masked); a result is for resume (sealed)
        4: ("succeeded", 1, masked, kept, None, None, *timed),
        5: ("succeeded", 1, '{"text":"two"}', '"two"', None, None, "write", 1, 1, 1),
    }
    with sqlite3.connect(path) as connection:
        transitions = connection.execute(
            "SELECT step_id, attempt, state FROM transition WHERE run_id = 'r1' "
            "ORDER BY step_id, id"
        ).fetchall()
    assert transitions == [
        (step, 1, state) for step in range(1, 6) for state in ("running", "succeeded")
    ]


class _Name(str):
    """A text of a type of its own (masked like any other)."""


def test_the_masking_pass_masks_every_text_of_a_row_whatever_its_type(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RECORDED_ROWS_API_KEY", SECRET)
    environment = (SECRET,)
    other = ScrubbedText(f"checked before the secret was set: {SECRET}")
    other.environment = ()
    checked = scrubbed_text("a text checked under these secrets", {SECRET: "X_API_KEY"})
    row = (
        1,
        2.5,
        True,
        None,
        b"bytes are bound as they are",
        f"plain {SECRET}",
        _Name(f"named {SECRET}"),
        other,
        checked,
        "nothing to mask",
        "Bearer abcdefghijklmnopqrstuvwxyz0123456789",
        "lone \ud800 surrogate",
    )
    known: dict[str, str] = {}
    expected = [_masked_item(item, environment) for item in row]
    assert list(_masked(row, environment, known)) == expected
    assert list(_masked(row, environment, known)) == expected  # the second time from known
    assert SECRET not in " ".join(str(item) for item in expected)
    assert expected[:5] == list(row[:5])
    assert _masked(row[:5] + row[8:10], environment, known) is not None
    unchanged = (1, None, "nothing to mask", checked)
    assert _masked(unchanged, environment, known) is unchanged
    assert _masked({"a": f"x {SECRET}", "b": 1}, environment, known) == {
        "a": _masked_item(f"x {SECRET}", environment),
        "b": 1,
    }


def test_steps_ended_while_the_writer_takes_groups_leave_every_row_as_written_one_by_one(
    tmp_path: Path,
) -> None:
    steps = 600
    rows = []
    for merged in (True, False):
        path = tmp_path / f"{merged}.sqlite3"
        store = Store(path, flush_interval_s=0.001)
        store.writer.max_rows = 5  # the thread takes a group every few writes
        if not merged:
            store.writer.coalesce = None  # every row as it was queued
        store.create_run("r1", command="test", goal=None, params={}, options={})
        store.declare_steps("r1", [(step, "t", "none") for step in range(steps)])
        for step in range(steps):
            store.queue_step_start("r1", step, 1, float(step), f'{{"n":{step}}}', 0, False)
            if step % 3 == 0:
                store.queue_step_start("r1", step, 2, step + 0.5, f'{{"n":{-step}}}', 0, False)
            if step % 4 == 0:
                time.sleep(0.0002)  # the writer's thread may take a group now
            if step >= 2:
                ended = step - 2
                store.queue_step_end(
                    *("r1", ended, "succeeded", ended + 1.0, 1 + (ended % 3 == 0), None, None),
                    *(0.25, str(ended), None, None, 0, False),
                )
        store.close()
        with sqlite3.connect(path) as connection:
            rows.append(
                (
                    connection.execute(
                        "SELECT * FROM step WHERE run_id = 'r1' ORDER BY step_id"
                    ).fetchall(),
                    connection.execute(
                        "SELECT step_id, attempt, state, time FROM transition ORDER BY id"
                    ).fetchall(),
                )
            )
    assert rows[0] == rows[1]
    assert rows[0][0][5][4:12] == ("succeeded", None, None, 1, 5.0, 6.0, 0.25, '{"n":5}')
    assert rows[0][0][599][4] == "running"
