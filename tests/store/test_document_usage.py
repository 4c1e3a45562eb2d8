"""A document row's model usage: stored in columns of its own, read back as it was given;
None for a job that makes no model call and for a row written before the columns existed;
a count that is not a finite number >= 0 is not stored."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from plandag.store import open_store

RELEASE_0_1_0 = Path(__file__).parent / "data" / "store_release_0_1_0.sqlite3"

USAGE = {
    "requests": 5,
    "failed_requests": 1,
    "input_tokens": 14765,
    "output_tokens": 554,
    "cost_usd": 0.017535,
}


def test_usage_is_stored_with_its_document_and_read_back(tmp_path: Path) -> None:
    with open_store(tmp_path / "runs.sqlite3") as store:
        store.record_document("b1", 0, "a.txt", "ok", {"status": "ok"}, usage=USAGE)
        store.record_document("b1", 1, "b.xml", "ok", {"status": "ok"})
        first, second = store.documents("b1")
        assert (first.input, first.usage) == ("a.txt", USAGE)
        assert (second.input, second.usage) == ("b.xml", None)
        assert [row.usage for row in store.input_documents("a.txt")] == [USAGE]


def test_a_usage_count_that_is_no_number_is_not_stored(tmp_path: Path) -> None:
    odd = {
        "requests": True,
        "failed_requests": -1,
        "input_tokens": "12",
        "output_tokens": 7.0,
        "cost_usd": math.nan,
    }
    with open_store(tmp_path / "runs.sqlite3") as store:
        store.record_document("b1", 0, "a.txt", "error", None, usage=odd)
        (row,) = store.documents("b1")
    assert row.usage == {
        "requests": None,
        "failed_requests": None,
        "input_tokens": None,
        "output_tokens": 7,
        "cost_usd": None,
    }


def test_a_store_from_before_the_usage_columns_gets_them(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite3"
    shutil.copy(RELEASE_0_1_0, path)
    with open_store(path) as store:
        columns = {row[1] for row in store.connection.execute("PRAGMA table_info(document)")}
        assert {
            "requests",
            "failed_requests",
            "input_tokens",
            "output_tokens",
            "cost_usd",
        } <= columns
        store.connection.execute(
            "INSERT INTO document (batch_id, idx, input, status, record, time) "
            "VALUES ('old', 0, 'a.txt', 'ok', '{}', 0)"
        )
        (row,) = store.documents("old")
    assert row.usage is None
