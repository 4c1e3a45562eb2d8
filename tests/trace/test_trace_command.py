"""plandag trace / plandag diff: from a trace file or a run in the store; exit 2 for bad
arguments."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import lxml.html
import pytest
import typer
from typer.testing import CliRunner

from plandag.cli.trace_command import register
from plandag.errors import InputError


def trace_app() -> typer.Typer:
    app = typer.Typer(add_completion=False, rich_markup_mode=None)
    register(app)
    return app


def invoke(*args: str) -> Any:
    return CliRunner().invoke(trace_app(), list(args), env={"COLUMNS": "100"})


class FakeStore:
    """What the trace commands need of the run store: resolve_run_id, trace_path and run
    (its options)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def resolve_run_id(self, text: str) -> str:
        matches = [run for run in ("run-a", "run-b") if run.startswith(text)]
        if len(matches) != 1:
            raise InputError(f"no run {text!r} in {self.root}; `plandag runs` lists them")
        return matches[0]

    def trace_path(self, run_id: str) -> Path:
        return self.root / "traces" / f"{run_id}.jsonl"

    def run(self, run_id: str) -> Any:
        return types.SimpleNamespace(run_id=run_id, options={})

    def close(self) -> None:
        pass


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, sample_path: Path) -> list[Any]:
    opened: list[Any] = []
    module = types.ModuleType("plandag.store")

    def open_store(path: Path | None = None) -> FakeStore:
        opened.append(path)
        return FakeStore(sample_path.parent.parent)

    module.open_store = open_store  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "plandag.store", module)
    return opened


def test_trace_prints_the_timeline(sample_path: Path) -> None:
    result = invoke("trace", str(sample_path))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("run run-a  failed  6.50 s")
    assert [line[:26].rstrip() for line in lines[2:6]] == [
        "* 1 echo",
        "  2 echo",
        "* 3 nap",
        "* 4 echo",
    ]
    assert "critical path (*): 1 → 3 → 4  (5.50 s)" in lines


def test_trace_json_and_html(sample_path: Path, tmp_path: Path) -> None:
    result = invoke("trace", "--trace", str(sample_path), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["run_id"], document["status"], document["critical_path"]) == (
        "run-a",
        "failed",
        [1, 3, 4],
    )
    page = tmp_path / "report.html"
    result = invoke("trace", "--trace", str(sample_path), "--html", str(page))
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote {page}\n"
    assert len(lxml.html.parse(str(page)).xpath('//svg[@id="dag"]//g')) == 4


def test_trace_resolves_a_run_in_the_store(store: list[Any], tmp_path: Path) -> None:
    result = invoke("trace", "run-a", "--store", str(tmp_path / "runs.sqlite3"), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["run_id"] == "run-a"
    assert store == [tmp_path / "runs.sqlite3"]
    result = invoke("trace", "run-", "--json")
    assert result.exit_code == 2
    assert "no run 'run-' in" in result.output
    result = invoke("trace", "run-b")  # in the store, but no trace file
    assert result.exit_code == 2
    assert "run run-b has no trace (expected " in result.output


def test_unusable_arguments_exit_2(sample_path: Path, tmp_path: Path) -> None:
    result = invoke("trace")
    assert (result.exit_code, "give a RUN_ID or --trace FILE" in result.output) == (2, True)
    result = invoke("trace", "run-a", "--trace", str(sample_path))
    assert (result.exit_code, "not both" in result.output) == (2, True)
    result = invoke("trace", "--trace", str(tmp_path / "missing.jsonl"))
    assert result.exit_code == 2
    assert f"trace file {tmp_path / 'missing.jsonl'} does not exist" in result.output
    result = invoke("trace", "--trace", str(sample_path), "--html", str(tmp_path))
    assert (result.exit_code, "is a folder" in result.output) == (2, True)


def test_diff(sample_path: Path, sample_writer: Any, tmp_path: Path) -> None:
    other = tmp_path / "b.jsonl"
    sample_writer(other, "run-b")
    result = invoke("diff", str(sample_path), str(other), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["run_a"], document["run_b"], document["same_plan"]) == (
        "run-a",
        "run-b",
        True,
    )
    assert [outcome["a_id"] for outcome in document["outcomes"]] == [1, 2, 3, 4]
    result = invoke("diff", str(sample_path), str(other))
    assert result.exit_code == 0, result.output
    assert "plans: the same steps" in result.output
    assert "outcomes: 4 matched step(s), none changed" in result.output


def test_diff_of_runs_in_the_store(store: list[Any], sample_path: Path) -> None:
    (sample_path.parent / "run-b.jsonl").write_bytes(sample_path.read_bytes())
    result = invoke("diff", "run-a", "run-b", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == ["failed", "failed"]
    result = invoke("diff", "run-a", "nope")
    assert (result.exit_code, "no run 'nope'" in result.output) == (2, True)


def test_trace_of_a_run_in_a_real_store(tmp_path: Path, sample_writer: Any) -> None:
    from plandag.store import open_store

    database = tmp_path / "store" / "runs.sqlite3"
    store = open_store(database)
    store.create_run("run-a1b2", command="exec", goal=None, params={}, options={})
    sample_writer(store.trace_path("run-a1b2"), "run-a1b2")
    store.close()
    result = invoke("trace", "run-a", "--store", str(database), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["run_id"] == "run-a1b2"
    result = invoke("trace", "zzz", "--store", str(database))
    assert result.exit_code == 2
    assert "no run" in result.output
