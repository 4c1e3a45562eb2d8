"""A step's result is converted and encoded once for the run store and the trace
(:func:`plandag.scheduler.result.jsonable_result_text`); each side still masks it by its own
rules. The texts below are what ``plandag exec`` stored and traced when each side encoded the
result by itself: a secret of the environment, NaN and infinities, non-ASCII text, a lone
surrogate, a result longer than a trace shows, a plain string."""

from __future__ import annotations

import hashlib
import json
import math
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from plandag.scheduler.result import jsonable_result, jsonable_result_text, to_jsonable
from plandag.store.store import store_json
from tests.exec_plan import exec_plan

ENV_SECRET = "test-key-value-from-the-environment-0123456789"

TOOLS = r'''
import math
import os

from pydantic import BaseModel, ConfigDict

from plandag.tools import tool


class Reading(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="constants")
    value: float
    unit: str


@tool
def secret_result() -> dict[str, object]:
    """A result holding the environment's secret."""
    return {"token": os.environ["ANTHROPIC_API_KEY"], "note": "ok", "n": 3}


@tool
def nan_result() -> object:
    """A result whose conversion holds NaN (a pydantic model's), and an infinity."""
    return {"reading": Reading(value=math.nan, unit="°C"), "plain": math.inf}


@tool
def text_result() -> dict[str, object]:
    """Non-ASCII text, a lone surrogate, a tab."""
    return {"name": "Zoë ✓ 東京", "odd": "a\ud800b", "tab": "x\ty", "list": [1.5, 2, None]}


@tool
def long_result() -> dict[str, object]:
    """Longer than a trace shows."""
    return {"rows": [{"i": i, "s": "é" * 20} for i in range(300)]}


@tool
def string_result() -> str:
    """A plain string holding the secret."""
    return "key=" + os.environ["ANTHROPIC_API_KEY"] + " ünïcode"
'''

TOOL_NAMES = ["secret_result", "nan_result", "text_result", "long_result", "string_result"]

STORED = {
    1: '{"token":{"$env":"ANTHROPIC_API_KEY"},"note":"ok","n":3}',
    2: '{"reading":{"value":NaN,"unit":"°C"},"plain":"Infinity"}',
    3: '{"name":"Zoë ✓ 東京","odd":"a\\\\ud800b","tab":"x\\ty","list":[1.5,2,null]}',
    5: '{"$env_text":["key=",{"$env":"ANTHROPIC_API_KEY"}," ünïcode"]}',
}
LONG_STORED = (11000, "88d07952322454e11efda929f534013fd28b01a022fa0d79b80a7a5a5d90e533")

TRACED = {
    1: '{"token":"[secret]","note":"ok","n":3}',
    2: '{"reading":{"value":NaN,"unit":"°C"},"plain":"Infinity"}',
    3: '{"name":"Zoë ✓ 東京","odd":"a\\\\ud800b","tab":"x\\ty","list":[1.5,2,null]}',
    5: '"key=[secret] ünïcode"',
}
LONG_TRACED_HEAD = (
    '{"truncated":true,"chars":11000,'
    '"sha256":"88d07952322454e11efda929f534013fd28b01a022fa0d79b80a7a5a5d90e533",'
    '"preview":"{\\"rows\\":[{\\"i\\":0,\\"s\\":\\"éééééééééééééééééééé\\"}'
)


def _exec(tmp_path: Path) -> tuple[dict[int, tuple[str | None, str | None]], dict[int, str]]:
    """Run the five tools through ``plandag exec``; each step's stored result and result
    hash columns, and the raw text of the result in its trace span."""
    plan = {"steps": [{"id": i + 1, "tool": name, "args": {}} for i, name in enumerate(TOOL_NAMES)]}
    run_id, store_path = exec_plan(tmp_path, plan, TOOLS)
    connection = sqlite3.connect(store_path)
    try:
        stored = {
            step_id: (text, digest)
            for step_id, text, digest in connection.execute(
                "SELECT step_id, result, result_hash FROM step WHERE run_id = ?", (run_id,)
            )
        }
    finally:
        connection.close()
    traced = {}
    trace = (tmp_path / "store" / "traces" / f"{run_id}.jsonl").read_text(encoding="utf-8")
    for line in trace.splitlines():
        data = json.loads(line)
        if data.get("kind") == "step":
            found = re.search(r'"result":(.*),"superseded_by":', line)
            assert found is not None, line
            traced[data["attrs"]["step_id"]] = found.group(1)
    return stored, traced


def test_results_are_stored_and_traced_as_each_side_wrote_them_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ENV_SECRET)
    stored, traced = _exec(tmp_path)
    assert {step_id: stored[step_id] for step_id in STORED} == {
        step_id: (text, None) for step_id, text in STORED.items()
    }
    long_text, long_digest = stored[4]
    assert long_digest is None
    assert long_text is not None
    assert (len(long_text), hashlib.sha256(long_text.encode()).hexdigest()) == LONG_STORED
    assert {step_id: traced[step_id] for step_id in TRACED} == TRACED
    assert traced[4].startswith(LONG_TRACED_HEAD)
    assert ENV_SECRET not in json.dumps([stored, traced])


class _Reading(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="constants")
    value: float


VALUES: list[Any] = [
    {"a": 1, "b": [1.5, None, True], "c": {"d": "é"}},
    [1, "two", 3.25],
    {"odd": "a\ud800b", 1: "int key"},
    ("a", "tuple"),
    {"reading": _Reading(value=math.nan)},
    {"reading": _Reading(value=-math.inf)},
    {"big": 10**5000},
    1.5,
    math.nan,
    b"bytes",
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_shared_text_is_the_compact_json_of_the_conversion(value: Any) -> None:
    converted, text = jsonable_result_text(value)
    assert converted is jsonable_result(value)
    try:
        expected: str | None = json.dumps(
            to_jsonable(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False
        )
    except ValueError:  # NaN, an infinity, an int too long to write
        expected = None
    assert text == expected
    again = jsonable_result_text(value)
    assert again[0] is converted  # converted once
    assert again[1] is text  # encoded once
    if text is not None:  # the store writes the same text given it or not
        assert store_json(converted, jsonable=True, text=text) == store_json(value)


@pytest.mark.parametrize("value", ["text", 3, True, None])
def test_plain_values_are_returned_as_they_are_without_a_text(value: Any) -> None:
    assert jsonable_result_text(value) == (value, None)
