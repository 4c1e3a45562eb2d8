"""An ``extract`` document in the trace: a summary line of at most 1 KB whatever the input's
name and the record hold, redaction included; ``--trace-detail full`` keeps the whole record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from plandag.extract.nfe.output import CHECK_NAMES
from plandag.trace.redact import Redactor
from plandag.trace.writer import (
    SUMMARY_LINE_BYTES,
    SUMMARY_SOURCE_BYTES,
    TraceWriter,
    document_summary,
    document_summary_text,
)

#: Every NF-e check failing and six error codes: the most a real record puts in a summary.
NFE_CHECKS = CHECK_NAMES
RECORD = {
    "source": "x",
    "status": "check_failed",
    "errors": [{"code": code} for code in ("a_code", "b_code", "c_code", "d", "e", "f")],
    "checks": {name: {"status": "fail", "detail": "d" * 500} for name in NFE_CHECKS},
}


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().splitlines() if b'"tool":"extract"' in line]


def _write(tmp_path: Path, source: str, record: Any, redact: Redactor | None = None) -> bytes:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, "0123456789abcdef", redact=redact) as writer:
        writer.document(123456, source, str(record.get("status")), record, 1.0e9, 1.0e9 + 0.25)
    (line,) = _lines(path)
    return line


@pytest.mark.parametrize(
    "name",
    [
        "\x01" * 300,  # control characters: six bytes each in JSON
        '"' * 300,  # quotes: two bytes each
        "\\" * 300,  # backslashes: two bytes each
        "\\xff" * 100,  # a name's undecodable bytes as plandag shows them
        "é" * 300,  # two bytes each in UTF-8
        "\U0001f600" * 300,  # four bytes each
        "folder/" * 100 + "nota.xml",
    ],
)
def test_a_summary_line_is_at_most_1_kb_whatever_the_path_holds(tmp_path: Path, name: str) -> None:
    line = _write(tmp_path, name, RECORD)

    assert len(line) <= SUMMARY_LINE_BYTES == 1024
    attrs = json.loads(line)["attrs"]
    assert attrs["detail"] == attrs["args"]["path"]
    assert attrs["detail"].endswith("\u2026")
    assert name.startswith(attrs["detail"][:-1])
    assert len(attrs["detail"]) > 10  # cut to fit, not dropped
    assert attrs["result"] == {
        "status": "check_failed",
        "failed_checks": list(NFE_CHECKS[:5]),
        "errors": ["a_code", "b_code", "c_code", "d", "e"],
        "more": 3,
    }


def test_a_short_plain_path_is_kept_whole(tmp_path: Path) -> None:
    line = _write(tmp_path, "notas/2024/35180834128745000152550010000476121675985748.xml", RECORD)

    attrs = json.loads(line)["attrs"]
    assert attrs["detail"] == "notas/2024/35180834128745000152550010000476121675985748.xml"


def test_a_summary_line_is_at_most_1_kb_whatever_the_record_holds(tmp_path: Path) -> None:
    record = {
        "status": "\x02" * 5000,
        "errors": [{"code": "\x03" * 100} for _ in range(9)],
        "checks": {"\x04" * 100 + str(n): {"status": "fail"} for n in range(9)},
    }

    line = _write(tmp_path, "\x01" * 4000, record)

    assert len(line) <= SUMMARY_LINE_BYTES
    attrs = json.loads(line)["attrs"]
    assert attrs["status"] == "succeeded"
    assert attrs["step_id"] == 123457


def test_redaction_that_lengthens_a_name_keeps_the_line_within_1_kb(tmp_path: Path) -> None:
    # "a@b.co" (6 characters) is masked as "[email]" (7): masks may lengthen a name
    name = "a@b.co/" * 40 + "x.xml"

    line = _write(tmp_path, name, RECORD, redact=Redactor(personal=True))

    assert len(line) <= SUMMARY_LINE_BYTES
    assert b"a@b.co" not in line


def test_trace_detail_full_keeps_a_large_record_whole(tmp_path: Path) -> None:
    record = {
        "source": "big.xml",
        "status": "ok",
        "errors": [],
        "checks": {},
        "items": [{"nItem": str(n), "xProd": "produto " * 10} for n in range(200)],
    }
    assert len(json.dumps(record)) > 20_000
    path = tmp_path / "trace.jsonl"

    with TraceWriter(path, "0123456789abcdef") as writer:
        writer.document(0, "big.xml", "ok", record, 1.0e9, 1.0e9 + 0.25, detail="full")

    (line,) = _lines(path)
    assert json.loads(line)["attrs"]["result"] == record


def _encoded_line(path: Path) -> tuple[bytes, bytes]:
    """The summary line written to ``path``, and the line the encoder makes of its value
    (``json.dumps`` of the decoded line, compact, UTF-8 kept): the two must be one text."""
    (line,) = _lines(path)
    value = json.loads(line)
    again = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return line, again.encode("utf-8")


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    source=st.text(max_size=60),
    status=st.sampled_from(["ok", "check_failed", "error"]) | st.text(max_size=12),
    index=st.integers(min_value=0, max_value=10**12),
    segment=st.integers(min_value=0, max_value=10**6),
    start=st.floats(allow_nan=False, allow_infinity=False),
    span=st.floats(min_value=0, max_value=1e6, allow_nan=False),
    failed=st.lists(st.text(max_size=10), max_size=7),
)
@example(  # 60 characters, 225 bytes: the path is cut though the line is short
    source="00000" + "\U00010000" * 55,
    status="ok",
    index=0,
    segment=0,
    start=0.0,
    span=0.0,
    failed=[],
)
def test_a_summary_line_is_the_text_the_json_encoder_makes(
    tmp_path: Path,
    source: str,
    status: str,
    index: int,
    segment: int,
    start: float,
    span: float,
    failed: list[str],
) -> None:
    # the line is put together from its values' texts: byte for byte the encoder's text
    path = tmp_path / f"trace-{index}-{segment}.jsonl"
    path.unlink(missing_ok=True)
    record = {"status": status, "checks": {name: {"status": "fail"} for name in failed}}
    with TraceWriter(path, "0123456789abcdef", segment=segment) as writer:
        writer.document(index, source, status, record, start, start + span)
    line, again = _encoded_line(path)
    assert line == again
    value = json.loads(line)
    shown = value["attrs"]["detail"]
    assert value == {
        "type": "span",
        "run_id": "0123456789abcdef",
        "time": start + span,
        "kind": "step",
        "name": f"step {index + 1} extract",
        "start": start,
        "end": start + span,
        "attrs": {
            "step_id": index + 1,
            "tool": "extract",
            "status": "failed" if status == "error" else "succeeded",
            "reason": status,
            "detail": shown,
            "depends_on": [],
            "attempts": [],
            "checks": [],
            "args": {"path": shown},
            "result": document_summary(record),
            "superseded_by": None,
            "segment": segment,
        },
    }
    source_bytes = len(source.encode("utf-8", "backslashreplace"))
    if source_bytes > SUMMARY_SOURCE_BYTES:  # a long path is cut to its first bytes, then …
        assert shown.endswith("\u2026")
        assert len(shown[:-1].encode("utf-8", "backslashreplace")) <= SUMMARY_SOURCE_BYTES - 3
    elif len(line) < SUMMARY_LINE_BYTES - 200:  # not cut to fit: the path is shown whole
        assert shown == source


@pytest.mark.parametrize(
    ("start", "end"),
    [(1, 2), (1.5, 2), (float("nan"), 1.0), (1.0, float("inf")), (True, 2.0)],
)
def test_times_that_are_not_finite_floats_take_the_general_path(
    tmp_path: Path, start: Any, end: Any
) -> None:
    path = tmp_path / "trace.jsonl"
    with TraceWriter(path, "0123456789abcdef") as writer:
        writer.document(3, "in/nota.xml", "ok", {"status": "ok"}, start, end)
    (line,) = _lines(path)
    value = json.loads(line)
    assert value["attrs"]["step_id"] == 4
    assert value["attrs"]["result"] == {"status": "ok", "failed_checks": [], "errors": []}


def test_documents_that_follow_each_other_and_given_summary_texts_make_the_same_lines(
    tmp_path: Path,
) -> None:
    # a batch passes each document's start as the very float its previous one ended at,
    # and the summary's text its worker made: the lines are the encoder's text all the same
    times = [1.7e9 + 0.1, 1.7e9 + 0.2, 1.7e9 + 0.3, 1.7e9 + 0.3, 5e-324, 1.7e9 + 0.4]
    records = [
        {"status": "ok", "checks": {}},
        {"status": "check_failed", "checks": {"vnf_formula": {"status": "fail"}}},
        {"status": "error", "errors": [{"code": "not_xml"}]},
        {"status": "ok", "checks": {"é": {"status": "fail"}}},
        {"status": "ok"},
    ]
    plain, given_texts = tmp_path / "plain.jsonl", tmp_path / "given.jsonl"
    with TraceWriter(plain, "0123456789abcdef") as writer:
        for index, record in enumerate(records):
            # fresh float objects: nothing to take from the line before
            start = times[index] + 0.0 if index != 3 else 1.7e9 + 0.25
            end = times[index + 1] + 0.0
            writer.document(index, f"in/{index}.xml", str(record["status"]), record, start, end)
    with TraceWriter(given_texts, "0123456789abcdef") as writer:
        previous_end = times[0]
        for index, record in enumerate(records):
            # one document starts where the one before ended; one does not (index 3)
            start = previous_end if index != 3 else 1.7e9 + 0.25
            end = times[index + 1] + 0.0
            summary = document_summary(record)
            writer.document(
                index,
                f"in/{index}.xml",
                str(record["status"]),
                None,
                start,
                end,
                summary=summary,
                summary_text=document_summary_text(summary),
            )
            previous_end = end
    assert given_texts.read_bytes() == plain.read_bytes()
    starts = [times[0], times[1], times[2], 1.7e9 + 0.25, times[4]]
    assert [json.loads(line)["start"] for line in _lines(plain)] == starts
    assert [json.loads(line)["end"] for line in _lines(plain)] == times[1:]
    for line in _lines(plain):
        value = json.loads(line)
        again = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        assert line == again.encode("utf-8")
