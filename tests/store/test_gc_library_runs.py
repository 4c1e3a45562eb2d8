"""gc keeps the runs that produced a plan of the plan library from Python too, whatever was
imported: the rule belongs to the store's schema (table ``library_plan``), not only to the
keeper the library registers when it is imported."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from plandag.dag.plan import Plan
from plandag.store import Store, open_store
from plandag.store.gc import collect_garbage

NOW = float(int(time.time()))
DAY = 86400.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "runs.sqlite3") as opened:
        yield opened


def _old_run(store: Store, run_id: str) -> None:
    store.create_run(run_id, command="run", goal="g", params={}, options={})
    store.flush()
    store.connection.execute(
        "UPDATE run SET status = 'succeeded', updated = ?, created = ? WHERE run_id = ?",
        (NOW - 40 * DAY, NOW - 40 * DAY, run_id),
    )


def test_a_library_plans_run_is_kept_without_any_keeper(store: Store) -> None:
    from plandag.library.catalog import PlanLibrary

    _old_run(store, "made-the-plan")
    _old_run(store, "other")
    plan = Plan.model_validate({"steps": [{"id": 1, "tool": "read_file", "args": {"path": "a"}}]})
    PlanLibrary(store).save("read_a", plan, status="admitted", source_run="made-the-plan")

    report = collect_garbage(store, older_than_s=30 * DAY, now=NOW, keepers=())

    assert report.run_ids == ("other",)
    assert report.kept_by_keepers == ("made-the-plan",)
    assert [run.run_id for run in store.runs()] == ["made-the-plan"]


def test_a_store_without_a_library_table_is_collected(store: Store) -> None:
    _old_run(store, "old")
    store.connection.execute("DROP TABLE library_plan")

    report = collect_garbage(store, older_than_s=30 * DAY, now=NOW, keepers=())

    assert report.run_ids == ("old",)
