"""No text makes a write of the run store or of a trace fail: lone surrogates (text UTF-8
cannot encode) are escaped as :mod:`plandag.surrogates` says, in JSON columns as JSON (their
strings escaped) and in text columns as text."""

from __future__ import annotations

import json
from pathlib import Path

from plandag.store import open_store
from plandag.store.store import BLOB_THRESHOLD_BYTES
from plandag.trace.writer import TraceWriter


def test_every_column_takes_a_lone_surrogate(tmp_path: Path) -> None:
    store = open_store(tmp_path / "runs.sqlite3")
    try:
        store.create_run(
            "r1",
            command="exec",
            goal="goal caf\udce9",
            params={"p\ud800": "v\udfff"},
            options={"tools": ["t\udcff.py"]},
        )
        store.update_run("r1", detail="detail \ud83d")
        # a JSON text a writer dumped itself, without the store's escaping
        raw = json.dumps({"x": "\ud800", "y": ["\udcff"]}, ensure_ascii=False)
        store.connection.execute("UPDATE run SET options = ? WHERE run_id = ?", (raw, "r1"))
        store.declare_steps("r1", [(1, "t", "none"), (2, "t", "none")])
        big = "\ud800" + "x" * BLOB_THRESHOLD_BYTES  # a blob
        store.step_ended("r1", 1, "succeeded", 1.0, result={"a": "\ud800"}, durable=True)
        store.step_ended("r1", 2, "succeeded", 1.0, result=big, durable=True)
        store.record_document("r1", 0, "in\udcff.xml", "ok", {"k": "v\ud800"})
        store.flush()
        run = store.run("r1")
        steps = store.steps("r1")
        documents = store.documents("r1")
    finally:
        store.close()
    assert run.goal == "goal caf\\xe9"
    assert run.params == {"p\\ud800": "v\\udfff"}
    assert run.detail == "detail \\ud83d"
    assert run.options == {"x": "\\ud800", "y": ["\\xff"]}
    assert steps[1].result == {"a": "\\ud800"}
    assert steps[2].result == "\\ud800" + "x" * BLOB_THRESHOLD_BYTES
    assert documents[0].record == {"k": "v\\ud800"}
    assert documents[0].input == "in\\xff.xml"


def test_a_trace_line_takes_a_lone_surrogate(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, "r1") as writer:
        writer.run_started("exec", "goal \ud800", {"p": "\udcff"})
        writer.write({"type": "note", "text": "\ud83d" * 5000})
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["goal"] == "goal \\ud800"
    assert lines[0]["params"] == {"p": "\\xff"}
    assert lines[1]["text"] == "\\ud83d" * 5000
