"""extract_document with the input's bytes already read (what a cluster worker does): the
same records as reading the path, the read step ending succeeded with those bytes."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from plandag.extract.nfe.document import (
    extract_document,
    input_read_step,
    load_plan_text,
    takes_bytes,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nfe"


def _extract(path: Path, **options: object) -> list[dict[str, object]]:
    async def run() -> list[dict[str, object]]:
        return await extract_document(path, **options)  # type: ignore[arg-type]

    return anyio.run(run)


def test_bytes_give_the_records_the_path_gives(tmp_path: Path) -> None:
    for path in sorted(EXAMPLES.glob("*.xml"))[:6]:
        assert _extract(path, data=path.read_bytes()) == _extract(path), path.name


def test_an_unusable_input_gets_the_same_error_record(tmp_path: Path) -> None:
    path = tmp_path / "notes.xml"
    path.write_bytes(b"not xml at all")
    from_path = _extract(path)
    assert from_path[0]["status"] == "error"
    assert _extract(path, data=b"not xml at all") == from_path
    import hashlib

    assert from_path[0]["sha256"] == hashlib.sha256(b"not xml at all").hexdigest()


def test_the_path_need_not_exist_when_the_bytes_are_given(tmp_path: Path) -> None:
    source = sorted(EXAMPLES.glob("*.xml"))[0]
    elsewhere = tmp_path / "on-another-machine" / source.name
    records = _extract(elsewhere, data=source.read_bytes())
    assert [record["source"] for record in records] == [str(elsewhere)]
    assert records[0]["status"] == _extract(source)[0]["status"]


def test_the_stored_plan_reads_its_input_in_step_one() -> None:
    from plandag.compiler import compile_plan
    from plandag.tools.registry import default_registry

    compiled = compile_plan(
        json.loads(load_plan_text()), default_registry(), params={"input": "a.xml", "index": 0}
    )
    assert input_read_step(compiled) == 1
    assert takes_bytes(None, None, None, 50_000_000)
    assert not takes_bytes(None, None, None, 50_000_001)


def test_a_plan_without_such_a_step_refuses_bytes(tmp_path: Path) -> None:
    plan = json.loads(load_plan_text())
    plan["steps"][0]["args"]["max_bytes"] = 1000
    text = json.dumps(plan)
    assert not takes_bytes(None, None, text, 10)
    with pytest.raises(ValueError, match="give the path"):
        _extract(sorted(EXAMPLES.glob("*.xml"))[0], data=b"<a/>", plan_text=text)
