"""One encoding per record for the JSONL line and the store's text, and the batch's fast path:
the same bytes as encoding each text on its own, and the general path whenever it must."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from plandag.extract.nfe.batch import extract_batch
from plandag.extract.nfe.output import record_json_texts


def _line(record: Any) -> str:
    return json.dumps(record, ensure_ascii=False, default=str)


def _compact(record: Any) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def test_both_texts_of_a_record() -> None:
    record = {"source": "a, b: c.xml", "n": 1, "x": [1.5, None, True], "o": {"k": "v"}}
    assert record_json_texts(record) == (
        '{"source": "a, b: c.xml", "n": 1, "x": [1.5, null, true], "o": {"k": "v"}}',
        '{"source":"a, b: c.xml","n":1,"x":[1.5,null,true],"o":{"k":"v"}}',
    )


def test_control_characters_in_strings_and_keys_stay_escaped() -> None:
    record = {"a\x00b": "c\x01d", "e": ["\x00", "\x01\x00"], "\x01": {"\x00": "\t\n"}}
    texts = record_json_texts(record)
    assert texts == (_line(record), _compact(record))
    assert texts is not None
    assert '"a\\u0000b": "c\\u0001d"' in texts[0]


def test_not_plain_json_or_a_lone_surrogate_takes_the_general_path() -> None:
    circular: dict[str, Any] = {}
    circular["self"] = circular
    for record in (
        {"v": math.nan},
        {"v": math.inf},
        {"v": {math.inf: 1}},
        {"v": object()},
        {"v": {1, 2}},
        circular,
        {"source": os.fsdecode(b"bad\xff.xml")},
        {os.fsdecode(b"k\xfe"): 1},
        {"v": "lone \ud800"},
    ):
        assert record_json_texts(record) is None, record


_KEYS = st.text(alphabet=st.sampled_from([*'ab,: "\\', "\x00", "\x01", "ç", "\u2028"]), max_size=4)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=6)
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(_KEYS, inner, max_size=4)
        | st.dictionaries(st.integers() | st.floats() | st.booleans() | st.none(), inner)
    ),
    max_leaves=16,
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_KEYS, _VALUES, max_size=6))
def test_always_the_texts_of_two_encodings_or_none(record: dict[str, Any]) -> None:
    try:
        line, compact = _line(record), _compact(record)
        line.encode("utf-8")
    except ValueError:  # NaN or infinity (also as a key), a lone surrogate
        assert record_json_texts(record) is None
    else:
        assert record_json_texts(record) == (line, compact)


def _record(source: str, sha: str, key: str, **more: Any) -> dict[str, Any]:
    return {
        "source": source,
        "sha256": sha,
        "status": "ok",
        "errors": [],
        "checks": {"key_check_digit": {"status": "pass", "detail": "right"}},
        "ide": {"chNFe": key},
        **more,
    }


def test_the_batch_writes_each_text_as_the_general_path_would(tmp_path: Path) -> None:
    """A lone surrogate in a name (escaped, and the duplicate check registered once, from
    the escaped record), NaN (the general path, no store text), a credential-looking value
    and control characters (the fast path) give the file and the texts of the general path."""
    bad = os.fsdecode(b"b\xff.xml")
    records = {
        "a.xml": [_record("a.xml", "1", "K1", note="Authorization: Bearer abcdefghijkl1234")],
        bad: [_record(bad, "2", "K1")],
        "c.xml": [_record("c.xml", "3", "K1", value=math.nan)],
        "d.xml": [_record("d.xml", "4", "K2", **{"x\x00y": "\x01"})],
    }
    for name in records:
        (tmp_path / name).write_bytes(b"<x/>")

    async def extractor(path: Path) -> list[dict[str, Any]]:
        return [dict(record) for record in records[path.name]]

    texts: list[tuple[str, str | None]] = []

    def on_record_json(record: Mapping[str, Any], text: str | None) -> None:
        texts.append((str(record["source"]), text))

    output = tmp_path / "out.jsonl"
    paths = [tmp_path / name for name in records]
    summary = anyio.run(
        lambda: extract_batch(paths, output, extractor=extractor, on_record_json=on_record_json)
    )
    assert summary.by_status == {"check_failed": 3, "ok": 1}

    def unique(status: str, detail: str) -> dict[str, Any]:
        return {
            "key_check_digit": {"status": "pass", "detail": "right"},
            "unique_in_batch": {"status": status, "detail": detail},
        }

    expected = [
        {
            **_record("a.xml", "1", "K1", note="Authorization: Bearer abcdefghijkl1234"),
            "status": "check_failed",
            "checks": unique("fail", "chNFe K1 also in b\\xff.xml, c.xml"),
        },
        {
            **_record("b\\xff.xml", "2", "K1"),
            "status": "check_failed",
            "checks": unique("fail", "chNFe K1 also in a.xml, c.xml"),
        },
        {
            **_record("c.xml", "3", "K1", value=math.nan),
            "status": "check_failed",
            "checks": unique("fail", "chNFe K1 also in a.xml, b\\xff.xml"),
        },
        {
            **_record("d.xml", "4", "K2", **{"x\x00y": "\x01"}),
            "checks": unique("pass", "no other record in the batch has this chNFe"),
        },
    ]
    assert output.read_text(encoding="utf-8") == "".join(_line(r) + "\n" for r in expected)
    # the texts given as each record was written (before the duplicates after it were known)
    alone = "no other record in the batch has this chNFe"
    first = {**expected[0], "status": "ok", "checks": unique("pass", alone)}
    second = {**expected[1], "checks": unique("fail", "chNFe K1 also in a.xml")}
    assert texts == [
        ("a.xml", _compact(first)),
        ("b\\xff.xml", _compact(second)),
        ("c.xml", None),
        ("d.xml", _compact(expected[3])),
    ]


def test_encoded_records_are_written_as_the_records_would_be(tmp_path: Path) -> None:
    from plandag.extract.nfe.encoded import encode_first, encode_ready
    from plandag.extract.nfe.output import JsonlRecordWriter

    records = [
        {"source": "a.xml", "status": "ok", "x": "ç, é: \\n"},
        {"source": "b.xml", "status": "ok", "value": math.nan},  # not JSON: no line
        {"source": "c.xml", "status": "error", "errors": [{"code": "x"}]},
    ]
    encoded = [
        encode_first(records[0]),
        encode_ready(records[1], None, keep=True),
        encode_first(records[2]),
    ]
    assert all(item is not None for item in encoded)
    assert encoded[1] is not None
    assert encoded[1].line is None
    by_records, by_texts = tmp_path / "records.jsonl", tmp_path / "texts.jsonl"
    for path, write in ((by_records, "records"), (by_texts, "texts")):
        writer = JsonlRecordWriter(path, append=False, grouped=True)
        for group in ([], encoded[:1], encoded[1:]):
            if write == "records":
                writer.write_input([item.record() for item in group if item is not None])
            else:
                writer.write_encoded([item for item in group if item is not None])
        writer.close()
    assert by_texts.read_bytes() == by_records.read_bytes()
    assert by_texts.read_bytes().count(b"\n") == 3
