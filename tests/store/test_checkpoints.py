"""The WAL is checkpointed by the writer's thread, never by the calling thread's
transactions (a run's start commits its plan and steps without copying the WAL into the
database first), and stays bounded all the same."""

from __future__ import annotations

from pathlib import Path

from plandag.store import Store, open_store


def _salt(store: Store) -> bytes:
    """The WAL header's salts: they change each time the WAL restarts after a checkpoint."""
    with open(f"{store.path}-wal", "rb") as wal:
        return wal.read(32)[16:24]


def _start(store: Store, run_id: str) -> None:
    store.create_run_with_plan(
        run_id,
        command="exec",
        goal="many steps",
        params={},
        options={},
        plan={"steps": [{"id": step, "tool": "note"} for step in range(1, 1001)]},
        plan_hash="0" * 64,
        source="stored",
        steps=[(step, "note", "none") for step in range(1, 1001)],
    )


def test_run_starts_never_checkpoint_and_the_writer_does(tmp_path: Path) -> None:
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        _start(store, "r0")
        first = _salt(store)
        page_size = store.connection.execute("PRAGMA page_size").fetchone()[0]
        for number in range(1, 40):  # past SQLite's 1,000 pages of automatic checkpoint
            _start(store, f"r{number}")
            assert _salt(store) == first, number
            if (tmp_path / "runs.sqlite3-wal").stat().st_size > 1200 * page_size:
                break
        assert (tmp_path / "runs.sqlite3-wal").stat().st_size > 1200 * page_size
        store.update_run("r0", status="succeeded")  # the writer's commit checkpoints
        _start(store, "after")  # the WAL restarts from its beginning
        assert _salt(store) != first
        assert store.run("after") is not None
    finally:
        store.close()
