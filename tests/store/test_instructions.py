"""The run store's instruction table: what ``plandag tell`` writes and a running
``plandag run`` takes, each instruction once, in order."""

from __future__ import annotations

from pathlib import Path

from plandag.store import open_store


def test_instructions_are_taken_once_in_order(tmp_path: Path) -> None:
    with open_store(tmp_path / "runs.sqlite3") as store:
        store.create_run("r1", command="run", goal="g", params={}, options={})
        assert store.take_instructions("r1") == []
        first = store.add_instruction("r1", "use ccc", who="ana")
        second = store.add_instruction("r1", "Score only a", who="bo", new_goal=True)
        store.add_instruction("r2", "another run's", who=None)
        taken = store.take_instructions("r1")
        assert [(row.id, row.text, row.who, row.new_goal) for row in taken] == [
            (first, "use ccc", "ana", False),
            (second, "Score only a", "bo", True),
        ]
        assert all(row.consumed_at is not None for row in taken)
        assert store.take_instructions("r1") == []  # once
        assert [row.consumed_at is not None for row in store.instructions("r1")] == [True, True]
    with open_store(tmp_path / "runs.sqlite3") as other:  # another process's view
        [row] = other.take_instructions("r2")
        assert (row.text, row.who, row.new_goal) == ("another run's", None, False)
