"""Taint per step result in the scheduler: results that came from outside (an HTTP body, a
file this run did not write) are tainted, and so is what a step makes of them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from plandag.brakes import UNLIMITED
from plandag.compiler import compile_plan
from plandag.scheduler import run_plan_sync
from plandag.tools import default_registry
from plandag.tools.http import use_transport


def test_an_outside_file_is_tainted_and_a_file_this_run_wrote_is_not(tmp_path: Path) -> None:
    outside = tmp_path / "given.txt"
    outside.write_text("from someone else", encoding="utf-8")
    mine = tmp_path / "mine.json"
    plan: dict[str, Any] = {
        "steps": [
            {"id": 1, "tool": "read_file", "args": {"path": str(outside)}},
            {
                "id": 2,
                "tool": "json_select",
                "args": {"data": {"a": "<step_1_result>"}, "expr": "a"},
            },
            {"id": 3, "tool": "write_json", "args": {"path": str(mine), "data": {"n": 1}}},
            {"id": 4, "tool": "read_file", "args": {"path": str(mine)}, "depends_on": [3]},
            {"id": 5, "tool": "json_select", "args": {"data": {"b": 2}, "expr": "b"}},
        ]
    }
    result = run_plan_sync(
        compile_plan(plan, default_registry()), approve="auto", write_boundary=UNLIMITED
    )
    assert result.status == "succeeded"
    assert {key: record.tainted for key, record in result.steps.items()} == {
        1: True,
        2: True,
        3: False,
        4: False,
        5: False,
    }
    assert result.to_json_dict()["steps"][0]["tainted"] is True


def test_a_file_written_from_tainted_data_stays_tainted(tmp_path: Path) -> None:
    outside = tmp_path / "given.txt"
    outside.write_text("hello", encoding="utf-8")
    copy = tmp_path / "copy.json"
    plan = {
        "steps": [
            {"id": 1, "tool": "read_file", "args": {"path": str(outside)}},
            {"id": 2, "tool": "write_json", "args": {"path": str(copy), "data": "<step_1_result>"}},
            {"id": 3, "tool": "read_file", "args": {"path": str(copy)}, "depends_on": [2]},
        ]
    }
    result = run_plan_sync(
        compile_plan(plan, default_registry()), approve="auto", write_boundary=UNLIMITED
    )
    assert [result.steps[key].tainted for key in (1, 2, 3)] == [True, True, True]


def test_an_http_body_is_tainted() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="page")

    plan = {"steps": [{"id": 1, "tool": "http_get", "args": {"url": "https://a.example/x"}}]}
    with use_transport(httpx.MockTransport(handler)):
        result = run_plan_sync(compile_plan(plan, default_registry()))
    assert (result.status, result.steps[1].tainted) == ("succeeded", True)
