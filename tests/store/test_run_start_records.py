"""What a new run records before its first step (its row, its plan version with the
plan's text, hash and estimate, the trace's first lines) is what the plan's own
conversion gives, made once for all of them; secrets in the plan's arguments stay masked."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
import rfc8785

from plandag.compiler import compile_plan
from plandag.compiler.compiled import CompiledPlan
from plandag.runs.options import RunOptions
from plandag.runs.segments import plan_estimate, start_run
from plandag.runs.traces import trace_factory
from plandag.scheduler.gate import boundary_spec
from plandag.scheduler.result import to_jsonable
from plandag.store import Store, open_store
from plandag.store.store import store_json
from plandag.tools import tool
from plandag.tools.registry import Registry
from plandag.trace.redact import Redactor
from plandag.trace.writer import TraceWriter
from tests.collector_states import collector_states

SECRET = "sk-live-0123456789abcdefghij"


@tool
def note(text: Any, seconds: float = 0.0) -> Any:
    """Return ``text``."""
    return text


def _compiled(args: dict[str, Any], params: dict[str, Any] | None = None) -> CompiledPlan:
    registry = Registry()
    registry.add_tool(note)
    plan = {
        "goal": "anotar três vezes",
        "params": {"who": {"type": "string", "default": "Zoë"}},
        "steps": [
            {"id": 1, "tool": "note", "args": args},
            {"id": 2, "tool": "note", "args": {"text": "<step_1_result>", "seconds": 0.25}},
            {"id": 3, "tool": "note", "args": {"text": "<param.who>", "seconds": 1.0}},
        ],
        "output": "<step_3_result>",
    }
    return compile_plan(plan, registry, params=params)


def _reference_hash(compiled: CompiledPlan) -> str:
    """The plan hash as the first versions made it: converted, written by rfc8785."""
    hashed = {
        "plan": compiled.plan.model_dump(mode="json", exclude_none=True),
        "params": dict(compiled.params),
        "write_boundary": boundary_spec(compiled.write_boundary),
    }
    return hashlib.sha256(rfc8785.dumps(to_jsonable(hashed))).hexdigest()


def _columns(store: Store, run_id: str) -> tuple[Any, ...]:
    connection = sqlite3.connect(store.path)
    try:
        plan_row = connection.execute(
            "SELECT version, hash, plan, source, estimate FROM plan_version WHERE run_id = ?",
            (run_id,),
        ).fetchall()
        run_row = connection.execute(
            "SELECT command, goal, status, params, options, version, segment FROM run "
            "WHERE run_id = ?",
            (run_id,),
        ).fetchone()
    finally:
        connection.close()
    return plan_row, run_row


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


@pytest.mark.parametrize(
    "args",
    [
        {"text": "plain", "seconds": 0.05},
        {"text": {"ação": [1.0, 1e-05, 1e21, -0.0, None, True], "k": "\u2028"}, "seconds": 3.5},
        {"text": {"Authorization": f"Bearer {SECRET}", "url": "https://u:pw@h.example/x"}},
        {"text": f"the key is {SECRET}"},
        # plans whose text is long: the store and the trace look for words in it in turn
        {"text": "long " * 1000, "seconds": 0.5},
        {"text": "long " * 1000 + f"Bearer {SECRET}"},
        {"text": "long " * 1000 + SECRET},
    ],
)
def test_a_new_run_records_what_the_plans_conversion_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: dict[str, Any]
) -> None:
    monkeypatch.setenv("PLANDAG_TEST_API_KEY", SECRET)
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        compiled = _compiled(args, params={"who": "Ana"})
        options = RunOptions()
        estimate = plan_estimate(store, compiled, executor_model=options.executor_model)
        outcome = anyio.run(
            lambda: start_run(
                store, compiled, options, command="exec", trace=trace_factory(store, False)
            )
        )
        assert outcome.status == "succeeded"
        plan_rows, run_row = _columns(store, outcome.run_id)
        plan_json = compiled.plan.model_dump(mode="json", exclude_none=True)
        assert plan_rows == [
            (
                1,
                _reference_hash(compiled),
                store_json(plan_json),
                "stored",
                store_json(estimate.as_json()),
            )
        ]
        assert run_row == (
            "exec",
            "anotar três vezes",
            "succeeded",
            store_json({"who": "Ana"}),
            run_row[4],
            1,
            0,
        )
        assert SECRET not in plan_rows[0][2]
        written = _lines(store.trace_path(outcome.run_id))
        reference = TraceWriter(tmp_path / "reference.jsonl", outcome.run_id, redact=Redactor())
        reference.run_started("exec", compiled.plan.goal, dict(compiled.params))
        reference.plan(1, plan_json, _reference_hash(compiled), "stored")
        reference.close()
        expected = _lines(tmp_path / "reference.jsonl")
        for line in (*written[:2], *expected):
            line.pop("time")
        assert written[:2] == expected
        assert SECRET not in store.trace_path(outcome.run_id).read_text(encoding="utf-8")
    finally:
        store.close()


def test_a_run_and_its_plan_are_committed_together(tmp_path: Path) -> None:
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        compiled = _compiled({"text": "x"})
        store.create_run_with_plan(
            "r1",
            command="exec",
            goal="g",
            params={},
            options={},
            plan=compiled.plan.model_dump(mode="json", exclude_none=True),
            plan_hash="ab" * 32,
            source="stored",
        )
        row = store.run("r1")
        assert (row.status, row.version, row.command) == ("running", 1, "exec")
        assert [version.hash for version in store.plan_versions("r1")] == ["ab" * 32]
    finally:
        store.close()


@tool
def bearer_token_note(text: Any) -> Any:
    """Return ``text`` (a name the store's sealing rules look at: ``bearer``, ``token``)."""
    return text


@pytest.mark.parametrize("with_secret_rules", [False, True])
def test_the_estimate_is_stored_as_its_conversion_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_secret_rules: bool
) -> None:
    # the estimate's text names every step's tool: with a name the sealing rules look at,
    # the text is decoded and sealed; without, stored as it is
    monkeypatch.setenv("PLANDAG_TEST_API_KEY", SECRET)
    registry = Registry()
    registry.add_tool(note)
    registry.add_tool(bearer_token_note)
    name = "bearer_token_note" if with_secret_rules else "note"
    plan = {
        "goal": "g",
        "steps": [
            {"id": 1, "tool": name, "args": {"text": "a"}},
            {"id": 2, "tool": "note", "args": {"text": "<step_1_result>", "seconds": 0.5}},
        ],
    }
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        compiled = compile_plan(plan, registry)
        options = RunOptions()
        estimate = plan_estimate(store, compiled, executor_model=options.executor_model)
        outcome = anyio.run(lambda: start_run(store, compiled, options, command="exec"))
        assert outcome.status == "succeeded"
        plan_rows, _ = _columns(store, outcome.run_id)
        assert plan_rows[0][4] == store_json(estimate.as_json())
        assert json.loads(plan_rows[0][4])["steps"]["1"]["tool"] == name
    finally:
        store.close()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_paused_while_the_run_is_recorded_and_restored_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, enabled: bool
) -> None:
    import gc

    from plandag.runs import segments

    seen = collector_states(monkeypatch, segments, "estimate_plan")
    store = open_store(tmp_path / "runs.sqlite3")
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        compiled = _compiled({"text": "plain", "seconds": 0.05})
        outcome = anyio.run(
            lambda: start_run(
                store, compiled, RunOptions(), command="exec", trace=trace_factory(store, False)
            )
        )
        assert outcome.status == "succeeded"
        assert gc.isenabled() is enabled
        # a failure while recording restores it too
        monkeypatch.setattr(store, "create_run_with_plan", _refuse)
        with pytest.raises(RuntimeError, match="refused"):
            anyio.run(lambda: start_run(store, compiled, RunOptions(), command="exec"))
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()
        store.close()
    assert seen[:1] == [False]


def _refuse(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("refused")
